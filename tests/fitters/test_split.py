import numpy as np
import pytest

from fitters.split import Split, split_collective, split_rows, workload_groups


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


def test_a_workloads_trace_sets_stay_on_one_side_of_every_split():
    # trace sets 7 and 8 record one workload (two seeds of the random sharder drew one plan); 9 has no workload id
    trace_sets = [6, 6, 7, 7, 8, 8, 9]
    groups = workload_groups(trace_sets, [6, 6, 7, 7, 7, 7, None])
    assert groups.tolist() == ["w6", "w6", "w7", "w7", "w7", "w7", "t9"]
    sides_seen = set()
    for seed in range(40):
        split = split_rows(groups, seed)
        test = {trace_sets[i] for i in split.test}
        assert (7 in test) == (8 in test)
        assert test and {trace_sets[i] for i in split.train}
        sides_seen.add(7 in test)
    assert sides_seen == {True, False}   # the pair goes either way, whole


def test_sets_without_workload_ids_are_held_out_by_trace_set():
    assert workload_groups([3, 4], [None, float("nan")]).tolist() == ["t3", "t4"]
