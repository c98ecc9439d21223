"""Size ladders, per-collective layouts and seeded random all_to_allv splits."""
import numpy as np
import pytest

from collectors.comms.sizes import build_plan, equal_layout, ladder, parse_bytes, random_splits
from pmdb.errors import PmdbError


@pytest.mark.parametrize("text, expected", [("4", 4), ("64MiB", 64 * 2**20), ("1K", 1024), ("2mb", 2 * 2**20),
                                            ("3 GiB", 3 * 2**30), (16, 16)])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "4XB", "-4", "0", "1.5M"])
def test_parse_bytes_rejects(text):
    with pytest.raises(PmdbError, match="bad size"):
        parse_bytes(text)


def test_ladder_doubles_and_checks():
    assert ladder(4, 64, 2) == [4, 8, 16, 32, 64]
    assert ladder(4, 100, 4) == [4, 16, 64]
    with pytest.raises(PmdbError, match="factor"):
        ladder(4, 64, 1)
    with pytest.raises(PmdbError, match="below"):
        ladder(64, 4, 2)


def test_equal_layouts_match_the_size_definitions():
    n = 4
    assert equal_layout("all_reduce", 64, n, 4) == ((16,) * n, (16,) * n)
    assert equal_layout("all_to_all", 64, n, 4) == ((16,) * n, (16,) * n)
    assert equal_layout("all_gather", 64, n, 4) == ((4,) * n, (16,) * n)
    assert equal_layout("reduce_scatter", 64, n, 4) == ((16,) * n, (4,) * n)
    # too small to split: one element per chunk
    assert equal_layout("all_gather", 4, n, 4) == ((1,) * n, (4,) * n)


def test_random_splits_are_seeded_and_average_the_size():
    a = random_splits(4096, 4, 4, seed=7, size_index=3, draw=0)
    b = random_splits(4096, 4, 4, seed=7, size_index=3, draw=0)
    c = random_splits(4096, 4, 4, seed=8, size_index=3, draw=0)
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    chunk = 4096 // (4 * 4)
    assert a.min() >= 1 and a.max() <= 2 * chunk - 1
    assert random_splits(16, 4, 4, seed=0, size_index=0, draw=0) is None  # one element per chunk: no randomness


def test_build_plan_dedupes_and_draws():
    steps = build_plan(["all_gather", "all_to_allv"], 2, [4, 8, 16, 1024], 4, random_draws=3, seed=1)
    gather = [s for s in steps if s.collective == "all_gather"]
    assert [s.out_elems for s in gather] == [(2, 2), (4, 4), (256, 256)]  # 4 and 8 B both round to 2 elements
    assert all(s.split_kind == "equal" for s in gather)
    alltoallv = [s for s in steps if s.collective == "all_to_allv"]
    assert len(alltoallv) == 3 * 2  # 16 B and 1 KiB; 4 and 8 B have no room for random chunks
    for step in alltoallv:
        matrix = np.array(step.splits)
        assert step.split_kind == "random"
        assert list(matrix.sum(axis=1)) == list(step.in_elems) and list(matrix.sum(axis=0)) == list(step.out_elems)
    assert len({s.splits for s in alltoallv}) == len(alltoallv)


@pytest.mark.parametrize("kwargs, pattern", [
    (dict(collectives=["broadcast"]), "unknown collective"),
    (dict(world_size=1), "at least 2 ranks"),
    (dict(random_draws=0), "random-splits"),
])
def test_build_plan_rejects(kwargs, pattern):
    args = dict(collectives=["all_to_allv"], world_size=2, sizes=[64], elem_size=4)
    random_draws = kwargs.pop("random_draws", 1)
    args.update(kwargs)
    with pytest.raises(PmdbError, match=pattern):
        build_plan(args["collectives"], args["world_size"], args["sizes"], args["elem_size"],
                   random_draws=random_draws)
