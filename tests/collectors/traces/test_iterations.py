"""Iteration assignment with span markers (ProfilerStep#n): ops outside every marker belong to no iteration, in
hand-built Kineto and execution traces with ops before, between and after the steps."""
import pandas as pd

from collectors.traces.et import parse_et
from collectors.traces.kineto import parse_kineto


def _event(name, ts, dur, cat="cpu_op"):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": {}}


def _iterations(frame, names):
    """Iteration of each named row (None outside every iteration)."""
    by_name = dict(zip(frame["name"], frame["iteration"]))
    return [None if pd.isna(by_name[n]) else int(by_name[n]) for n in names]


def test_kineto_ops_between_steps_belong_to_no_iteration():
    doc = {"schemaVersion": 1, "traceEvents": [
        _event("before", 0, 5),
        _event("ProfilerStep#0", 10, 100, "user_annotation"),
        _event("in_step0", 20, 30), _event("end_of_step0", 110, 0),
        _event("gap", 120, 10),                      # between the two steps: the bug put it into step 0
        _event("ProfilerStep#1", 150, 100, "user_annotation"),
        _event("in_step1", 160, 50),
        _event("after", 300, 5)]}
    trace = parse_kineto(doc, "hand-built")
    names = ["before", "in_step0", "end_of_step0", "gap", "in_step1", "after"]
    assert _iterations(trace.ops, names) == [None, 0, 0, None, 1, None]
    assert trace.iterations["iteration"].tolist() == [0, 1]
    assert trace.iterations["start_us"].tolist() == [10, 150] and trace.iterations["dur_us"].tolist() == [100, 100]


def _et_node(node_id, name, parent):
    return {"id": node_id, "name": name, "ctrl_deps": parent, "inputs": {"values": [], "shapes": [], "types": []},
            "outputs": {"values": [], "shapes": [], "types": []},
            "attrs": [{"name": "rf_id", "type": "uint64", "value": node_id}, {"name": "tid", "type": "uint64",
                                                                               "value": 1}]}


def test_et_nodes_between_steps_belong_to_no_iteration():
    nodes = [(1, "[pytorch|profiler|execution_trace|process]", 1), (2, "[pytorch|profiler|execution_trace|thread]", 1),
             (3, "aten::before", 2),
             (4, "ProfilerStep#0", 2), (5, "aten::mul", 4), (6, "aten::add", 5),
             (7, "aten::gap", 2),                  # after step 0's subtree, before step 1
             (8, "ProfilerStep#1", 2), (9, "aten::cat", 8),
             (10, "aten::after", 2)]
    doc = {"schema": "1.1.1-chakra.0.0.4", "pid": 7, "time": "2024-01-01 00:00:00", "start_ts": 1, "finish_ts": 2,
           "nodes": [_et_node(*n) for n in nodes]}
    et = parse_et(doc, "hand-built")
    names = ["aten::before", "ProfilerStep#0", "aten::mul", "aten::add", "aten::gap", "ProfilerStep#1", "aten::cat",
             "aten::after"]
    assert _iterations(et.nodes, names) == [None, 0, 0, 0, None, 1, 1, None]
    assert et.iterations == 2


def test_aligned_iteration_runs_from_the_last_entry_to_the_last_exit():
    from pmdb.traces.iterations import aligned_iteration_us

    # rank 0 enters at 0 and leaves at 500 (it waited for rank 1 at its first collective); rank 1: 200..520
    assert aligned_iteration_us([0.0, 200.0], [500.0, 320.0]) == 320.0
    assert aligned_iteration_us([10.0], [90.0]) == 90.0
    # spans that do not overlap come from unrelated clocks: the slowest rank's duration
    assert aligned_iteration_us([0.0, 10_000.0], [500.0, 320.0]) == 500.0
