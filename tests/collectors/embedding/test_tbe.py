"""The batched lookup: FBGEMM TBE and torch EmbeddingBag agree, and backward applies the optimizer."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from collectors.embedding.indices import make_source
from collectors.embedding.tbe import make_lookup, to_tensors
from pmdb.errors import PmdbError

TABLES = [(300, 8), (50, 4), (1000, 16)]


def _batch(batch_size=16, pooling=3.0, seed=0):
    rng = np.random.default_rng(seed)
    source = make_source("zipf:1.1", 0)
    per_table = [source.batch(e, batch_size, pooling, rng) for e, _ in TABLES]
    return per_table, to_tensors(per_table)


def _reference(lookup, per_table):
    """Pooled sums computed by hand from the weights."""
    weights = [w.detach().clone() for w in
               (lookup.inner.split_embedding_weights() if lookup.implementation == "fbgemm_tbe"
                else [b.weight for b in lookup.inner.bags])]
    cols = []
    for (indices, lengths), weight in zip(per_table, weights):
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        cols.append(torch.stack([weight[torch.from_numpy(indices[bounds[b]:bounds[b + 1]])].sum(0)
                                 for b in range(lengths.size)]))
    return torch.cat(cols, 1), weights


@pytest.mark.parametrize("implementation", ["fbgemm_tbe", "torch_embedding_bag"])
@pytest.mark.parametrize("optimizer", ["exact_sgd", "exact_adagrad"])
def test_forward_matches_hand_pooling_and_backward_updates(implementation, optimizer):
    per_table, (indices, offsets) = _batch()
    lookup = make_lookup(TABLES, implementation, "cpu", optimizer, lr=0.5, seed=1)
    expected, before = _reference(lookup, per_table)
    out = lookup(indices, offsets)
    assert out.shape == (16, sum(d for _, d in TABLES))
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.backward(torch.ones_like(out))
    _, after = _reference(lookup, per_table)
    counts = np.bincount(per_table[0][0], minlength=TABLES[0][0])
    row = int(counts.argmax())
    delta = after[0][row] - before[0][row]
    if optimizer == "exact_sgd":  # w -= lr * (number of lookups of the row), per element
        torch.testing.assert_close(delta, torch.full_like(delta, -0.5 * counts[row]))
    else:  # first Adagrad step moves each touched element by -lr (grad / sqrt(grad^2))
        torch.testing.assert_close(delta, torch.full_like(delta, -0.5), rtol=1e-4, atol=1e-4)
    untouched = int(np.flatnonzero(counts == 0)[0])
    assert torch.equal(after[0][untouched], before[0][untouched])


def test_implementations_agree_and_backward_can_repeat():
    _, (indices, offsets) = _batch(seed=3)
    fb = make_lookup(TABLES, "fbgemm_tbe", optimizer="exact_sgd", lr=0.1, seed=2)
    tb = make_lookup(TABLES, "torch_embedding_bag", optimizer="exact_sgd", lr=0.1, seed=2)
    out_fb, out_tb = fb(indices, offsets), tb(indices, offsets)
    torch.testing.assert_close(out_fb, out_tb)
    grad = torch.randn_like(out_fb, generator=torch.Generator().manual_seed(0))
    for _ in range(2):  # the collector times repeated backward passes over one graph
        out_fb.backward(grad, retain_graph=True)
        out_tb.backward(grad, retain_graph=True)
    torch.testing.assert_close(fb(indices, offsets), tb(indices, offsets), rtol=1e-5, atol=1e-5)


def test_bad_arguments():
    with pytest.raises(PmdbError, match="unknown embedding implementation"):
        make_lookup(TABLES, "cuda_magic")
    with pytest.raises(PmdbError, match="FBGEMM-only"):
        make_lookup(TABLES, "torch_embedding_bag", optimizer="exact_row_wise_adagrad")
    with pytest.raises(PmdbError, match="unknown embedding optimizer"):
        make_lookup(TABLES, optimizer="adam")
    with pytest.raises(PmdbError, match="at least one table"):
        make_lookup([])
