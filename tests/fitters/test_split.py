import numpy as np
import pytest

from fitters.split import Split, split_collective, split_rows


def test_split_rows_is_seeded_disjoint_and_keeps_configs_together():
    groups = np.repeat([f"cfg{i}" for i in range(50)], 2)  # every config measured twice
    first, again, other = split_rows(groups, 3), split_rows(groups, 3), split_rows(groups, 4)
    assert np.array_equal(first.test, again.test) and not np.array_equal(first.test, other.test)
    assert np.intersect1d(first.train, first.test).size == 0
    assert first.train.size + first.test.size == groups.size
    assert set(groups[first.train]).isdisjoint(groups[first.test])
    assert first.test.size == 20  # 10 of 50 configs, both rows each


def test_split_rows_tiny_sets_get_both_sides():
    split = split_rows(["a", "b"], 0)
    assert split.train.size == 1 and split.test.size == 1


def test_split_refuses_overlap():
    with pytest.raises(ValueError):
        Split(np.array([0, 1]), np.array([1, 2]))


def test_collective_split_holds_out_every_fifth_size_and_random_points():
    sizes = np.array([2 ** i for i in range(12)] * 2 + [300, 5000])
    kinds = np.array(["equal"] * 24 + ["random"] * 2)
    split = split_collective(sizes, kinds)
    held = set(sizes[split.test])
    assert held == {2 ** 4, 2 ** 9, 300, 5000}
    assert (kinds[split.train] == "equal").all()
    assert split.test.size == 6  # both rows of each held-out size, and the two random points
