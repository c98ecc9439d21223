"""A Kineto trace that marks no iteration (no ProfilerStep#n) is predicted whole, with a warning that says so; a
marked one gives none. Real shared traces: HolisticTraceAnalysis's simple add (A100), PARAM's linear (RTX 2080 Ti)."""
from __future__ import annotations

from simulator.predict import predict_trace_set, unmarked_note


def test_a_trace_without_iteration_markers_is_named(store, gpu_trace, capsys):
    ts = gpu_trace("hta_simple_add", "a100-hta", et=False)
    assert "marks no iterations" in unmarked_note(store, ts)
    capsys.readouterr()
    predict_trace_set(store, ts, mode="replay")
    assert f"pmdb: warning: trace set {ts} marks no iterations" in capsys.readouterr().err


def test_a_marked_trace_gives_no_warning(store, gpu_trace):
    assert unmarked_note(store, gpu_trace("param_linear", "rtx", et=False)) is None
