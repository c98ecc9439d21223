"""A Kineto trace that marks no iteration (no ProfilerStep#n) is predicted whole, with a warning that says so; a
marked one gives none. Real shared traces: HolisticTraceAnalysis's simple add (A100), PARAM's linear (RTX 2080 Ti)."""
from __future__ import annotations

import pytest

from collectors.traces.ingest import RankTraces, ingest_trace_set
from pmdb import platform as platforms
from simulator.predict import predict_trace_set, unmarked_note


def test_a_trace_without_iteration_markers_is_named(store, shared_data, capsys):
    folder = shared_data / "traces" / "gpu" / "hta_simple_add"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    platforms.ensure_named(store, "a100-hta", device_kind="cuda")
    with store.run("trace", "a100-hta", {}) as run:
        ts = ingest_trace_set(store, run.run_id, "a100-hta", [RankTraces(0, folder / "kineto.json.gz", None)],
                              source="imported")
    assert "marks no iterations" in unmarked_note(store, ts)
    capsys.readouterr()
    predict_trace_set(store, ts, mode="replay")
    assert f"pmdb: warning: trace set {ts} marks no iterations" in capsys.readouterr().err


def test_a_marked_trace_gives_no_warning(store, shared_data):
    folder = shared_data / "traces" / "gpu" / "param_linear"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    platforms.ensure_named(store, "rtx", device_kind="cuda")
    with store.run("trace", "rtx", {}) as run:
        ts = ingest_trace_set(store, run.run_id, "rtx", [RankTraces(0, folder / "kineto.json.gz", None)],
                              source="imported")
    assert unmarked_note(store, ts) is None
