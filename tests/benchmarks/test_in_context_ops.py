"""benchmarks/in_context_ops.py: names matched between a timeline and torch's functions, the forward's predicted ops,
the GEMM table's gaps, and a real (tiny) training step timed call by call in both modes."""
from __future__ import annotations

from harness import TINY_BERT, load_benchmark


def _module():
    return load_benchmark("in_context_ops")


def _event(op: str, phase: str, predicted: float, t1: float) -> dict:
    return {"ph": "X", "args": {"op": op, "phase": phase, "predicted_us": predicted, "t1_us": t1}}


def test_short_names_meet_between_the_trace_and_torch_functions():
    ico = _module()
    assert [ico.short(n) for n in ("aten::linear", "__add__", "add_", "__getitem__")] == ["linear", "add", "add_",
                                                                                         "index"]


def test_the_predicted_forward_keeps_forward_and_loss_ops_in_order():
    ico = _module()
    trace = {"traceEvents": [_event("aten::linear", "fw", 50.0, 5.0), _event("aten::dropout", "fw", 300.0, 10.0),
                             _event("aten::mm", "bw", 70.0, 1.0), _event("aten::cross_entropy_loss", "loss", 9.0, 2.0),
                             {"ph": "X", "args": {"phase": "fw"}}]}
    assert ico.predicted_ops(trace) == [("linear", 50.0, 5.0), ("dropout", 300.0, 10.0),
                                            ("cross_entropy_loss", 9.0, 2.0)]


def test_each_gemm_row_carries_the_predicted_work_since_the_previous_gemm():
    ico = _module()
    predicted = [("linear", 50.0, 5.0), ("dropout", 300.0, 10.0), ("view", 2.0, 1.0), ("add", 20.0, 3.0),
                 ("linear", 60.0, 4.0)]
    train = [("linear", 100.0), ("dropout", 400.0), ("add", 30.0), ("linear", 250.0)]
    evaluated = [("linear", 98.0), ("dropout", 9.0), ("add", 31.0), ("linear", 120.0)]
    lines = ico.gemm_lines(predicted, train, evaluated)
    assert lines[2] == "| 0 | linear | 50 | 100 | 98 | +2 | 5 | - |"
    assert lines[3] == "| 1 | linear | 60 | 250 | 120 | +130 | 340 | dropout, add |"   # 10+300+1+2+3+20+4
    assert ico.gemm_lines(predicted, train[:1], evaluated)[0].startswith("(GEMMs not matched")


def test_per_call_medians_follow_the_most_common_call_sequence():
    ico = _module()
    steps = [[("linear", 10.0), ("add", 1.0)], [("linear", 30.0), ("add", 3.0)], [("linear", 20.0), ("add", 2.0)],
             [("linear", 99.0)]]
    assert ico.per_call_medians(steps) == [("linear", 20.0), ("add", 2.0)]


def test_a_real_step_is_timed_call_by_call_in_both_modes():
    ico = _module()
    calls, forward, pace = ico.measured_forward(TINY_BERT, 2, 4)
    assert len(calls[True]) == len(calls[False]) == 2 and len(forward[True]) == 2 and len(pace) == 1
    trained = [name for name, _ in calls[True][0]]
    evaluated = [name for name, _ in calls[False][0]]
    assert "linear" in trained and "dropout" in trained and "dropout" in evaluated   # eval mode: the call, no draws
    assert all(us > 0 for step in calls[True] + calls[False] for _, us in step) and pace[0] > 0
