"""Index sources: shapes, Zipf head probabilities, the locality generator against its target, dataset files."""
from __future__ import annotations

import gzip

import numpy as np
import pytest
import torch

from collectors.embedding.indices import make_source
from collectors.embedding.reuse import reuse_factors
from pmdb.errors import PmdbError


@pytest.mark.parametrize("spec", ["uniform", "zipf:1.05", "zipf:0.8"])
def test_shapes_ranges_and_lengths(spec):
    rng = np.random.default_rng(0)
    indices, lengths = make_source(spec, 0).batch(500, 256, 12.0, rng)
    assert indices.dtype == np.int64 and lengths.dtype == np.int64
    assert lengths.shape == (256,) and indices.size == lengths.sum()
    assert indices.min() >= 0 and indices.max() < 500
    assert abs(lengths.mean() - 12.0) < 1.0 and lengths.std() > 0  # vary around the pooling factor


def test_zipf_head_follows_the_law():
    alpha, rows = 1.05, 100_000
    source = make_source(f"zipf:{alpha}", seed=3)
    indices, _ = source.batch(rows, 2048, 100, np.random.default_rng(1))
    _, counts = np.unique(indices, return_counts=True)
    top = np.sort(counts)[::-1][:3] / indices.size
    harmonic = (np.arange(1, rows + 1, dtype=float) ** -alpha).sum()
    expected = np.arange(1, 4, dtype=float) ** -alpha / harmonic
    np.testing.assert_allclose(top, expected, rtol=0.05)


def test_zipf_hot_rows_stay_hot_and_seed_moves_them():
    rng = np.random.default_rng(0)
    a = make_source("zipf:1.2", seed=7)
    hot = [np.bincount(a.batch(10_000, 512, 20, rng)[0]).argmax() for _ in range(3)]
    assert len(set(hot)) == 1
    other = np.bincount(make_source("zipf:1.2", seed=8).batch(10_000, 512, 20, rng)[0]).argmax()
    assert other != hot[0]


@pytest.mark.parametrize("year", ["2021", "2022"])
def test_locality_generator_reproduces_the_target(shared_data, year):
    source = make_source(f"locality:{shared_data}/dlrm_datasets/{year}/locality_stats.txt", 0)
    rng = np.random.default_rng(5)
    indices, lengths = source.batch(10_000_000, 4096, 50.0, rng)
    assert indices.size == lengths.sum()
    rf = reuse_factors(indices)
    assert np.abs(rf - source.target).max() < 0.02
    assert np.abs(rf - source.target).sum() < 0.05
    assert rf[0] == pytest.approx(source.entry.histogram[0], abs=0.01)  # the printed share of single lookups


def test_locality_entry_selection(shared_data):
    path = f"{shared_data}/dlrm_datasets/2022/locality_stats.txt"
    source = make_source(f"locality:{path}:fbgemm_t788_bs131072_5", 0)
    assert source.label.endswith(":fbgemm_t788_bs131072_5.pt")
    assert make_source(f"locality:{path}:2", 0).entry.name == "fbgemm_t788_bs131072_2.pt"


def test_small_table_still_gives_valid_rows(shared_data):
    source = make_source(f"locality:{shared_data}/dlrm_datasets/2021/locality_stats.txt", 0)
    indices, lengths = source.batch(50, 1024, 10.0, np.random.default_rng(0))
    assert indices.size == lengths.sum() and indices.max() < 50


def test_dataset_file(tmp_path):
    tables, samples = 3, 40
    rng = np.random.default_rng(0)
    lengths = torch.from_numpy(rng.integers(0, 5, size=(tables, samples)))
    offsets = torch.zeros(tables * samples + 1, dtype=torch.int64)
    offsets[1:] = torch.cumsum(lengths.reshape(-1), 0)
    indices = torch.arange(int(offsets[-1]), dtype=torch.int64) * 7
    path = tmp_path / "day.pt.gz"
    with gzip.open(path, "wb") as fh:
        torch.save((indices, offsets, lengths), fh)
    source = make_source(f"dataset:{path}:2", 0)
    got, got_lengths = source.batch(1000, 10, 99.0, np.random.default_rng(1))
    # a run of 10 consecutive samples of table 2, folded into 1000 rows
    start = next(s for s in range(samples - 9) if np.array_equal(lengths[2, s:s + 10].numpy(), got_lengths)
                 and np.array_equal(got, (indices[offsets[2 * samples + s]:offsets[2 * samples + s + 10]] % 1000)
                                    .numpy()))
    assert 0 <= start <= samples - 10
    with pytest.raises(PmdbError, match="larger than"):
        source.batch(1000, samples + 1, 1.0, np.random.default_rng(1))


@pytest.mark.parametrize("spec, message", [("gaussian", "bad index source"), ("zipf", "Zipf exponent"),
                                           ("zipf:-1", "must be > 0"), ("dataset:/no/such.pt.gz", "no such dataset"),
                                           ("locality:/no/such.txt", "no such locality")])
def test_bad_specs(spec, message):
    with pytest.raises(PmdbError, match=message):
        make_source(spec, 0)


def test_bad_dataset_content(tmp_path):
    path = tmp_path / "bad.pt.gz"
    with gzip.open(path, "wb") as fh:
        torch.save((torch.arange(4), torch.arange(3)), fh)
    with pytest.raises(PmdbError, match="cannot read dataset"):
        make_source(f"dataset:{path}", 0)


def test_bad_batch_arguments():
    with pytest.raises(PmdbError, match="pooling"):
        make_source("uniform", 0).batch(10, 4, 0.0, np.random.default_rng(0))
    with pytest.raises(PmdbError, match="rows"):
        make_source("uniform", 0).batch(0, 4, 1.0, np.random.default_rng(0))
