"""In-context fits hold out whole workloads: one shape and plan recorded twice never lands on both sides."""
from __future__ import annotations

import pandas as pd

from fitters.collective_context import held_out_groups
from fitters.split import split_rows


def test_a_workloads_trace_sets_stay_on_one_side_of_every_split():
    # trace sets 7 and 8 record one workload (two seeds of the random sharder drew one plan); 9 has no workload id
    rows = pd.DataFrame({"trace_set_id": [6, 6, 7, 7, 8, 8, 9], "workload_id": [6, 6, 7, 7, 7, 7, None]})
    groups = held_out_groups(rows)
    assert groups.tolist() == ["w6", "w6", "w7", "w7", "w7", "w7", "t9"]
    sides_seen = set()
    for seed in range(40):
        split = split_rows(groups, seed)
        test = set(rows["trace_set_id"].iloc[split.test])
        assert (7 in test) == (8 in test)
        assert test and set(rows["trace_set_id"].iloc[split.train])
        sides_seen.add(7 in test)
    assert sides_seen == {True, False}   # the pair goes either way, whole


def test_rows_without_workload_ids_are_held_out_by_trace_set():
    rows = pd.DataFrame({"trace_set_id": [3, 4]})
    assert held_out_groups(rows).tolist() == ["t3", "t4"]
