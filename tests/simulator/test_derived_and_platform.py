"""Derived trace sets (sharding study) have no workload run: run lookups and `predict --all` skip them. Report
plots and error tables filter by target platform."""
from __future__ import annotations

import pytest

from pmdb import platform as platforms
from pmdb.metrics import gmae
from pmdb.errors import PmdbError
from simulator import error_stats as error_tables
from simulator.engine import TimedOp, simulate
from simulator.predict import pending_runs
from simulator.store_rows import ModelUse, Prediction, store_prediction, trace_set_for_run
from report.prediction_figures import predicted_vs_measured, stream_breakdown, write_report
from simulator.semantics import COMM, COMPUTE, SyncHost


def _workload_run(store, platform: str, name: str) -> tuple[int, str]:
    """(workload id, workload run id) with a measured time and no trace set yet."""
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "dlrm", "name": name, "config": {}, "config_hash": name,
                                             "batch_size": 64, "world_size": 2, "sharder": "naive"},
                               returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 5, "warmup": 1, "measured_us": 1000.0})
    return wid, run.run_id


def _trace_set(store, platform: str, wid: int, source: str) -> int:
    with store.run("trace", platform, {}) as run:
        return store.insert_one("trace_sets", {"run_id": run.run_id, "platform": platform, "workload_id": wid,
                                               "world_size": 2, "source": source, "measured_us": 900.0},
                                returning="trace_set_id")


def test_derived_trace_sets_are_never_a_runs_trace_set(store):
    platform = platforms.ensure_named(store, "cpu-derived", device_kind="cpu")
    wid, truth = _workload_run(store, platform, "dlrm_derived")
    _trace_set(store, platform, wid, "derived")
    with pytest.raises(PmdbError, match="has no captured trace set"):
        trace_set_for_run(store, truth)
    assert pending_runs(store, platform) == []           # only a derived set: nothing to predict
    captured = _trace_set(store, platform, wid, "captured")
    newer_derived = _trace_set(store, platform, wid, "derived")
    assert newer_derived > captured
    assert trace_set_for_run(store, truth) == captured   # the newer derived set is not picked
    assert pending_runs(store, platform) == [truth]


def _predicted(store, platform: str, predicted: float) -> None:
    wid, truth = _workload_run(store, platform, f"dlrm_{platform}")
    ts = _trace_set(store, platform, wid, "captured")
    ops = [TimedOp(kernels=((COMPUTE, 300.0, 0.0, 0.0),)),
           TimedOp(kernels=((COMM, 200.0, 0.0, 0.0),), is_collective=True)]
    result = simulate([ops, ops], SyncHost())
    with store.run("predict", platform, {}) as run:
        store_prediction(store, run.run_id, Prediction(ts, "model", platform, platform, result, predicted,
                                                       measured_us=1000.0, workload_run_id=truth,
                                                       models=[ModelUse(f"m.{platform}", 1, 2)]))


def test_report_and_error_tables_filter_by_platform(store, tmp_path):
    a = platforms.ensure_named(store, "cpu-a", device_kind="cpu")
    b = platforms.ensure_named(store, "cpu-b", device_kind="cpu")
    _predicted(store, a, 900.0)
    _predicted(store, b, 1200.0)
    both = error_tables.e2e_errors(store, "platform")
    assert sorted(both["platform"]) == ["cpu-a", "cpu-b"]
    only_b = error_tables.e2e_errors(store, "platform", "model", platform=b)
    assert only_b["platform"].tolist() == ["cpu-b"] and only_b["geomean_pct"].iloc[0] == \
        pytest.approx(round(100 * gmae([1200.0], [1000.0]), 2))
    assert error_tables.e2e_errors(store, platform="cpu-none").empty
    assert predicted_vs_measured(store, tmp_path / "none", platform="cpu-none") is None
    assert stream_breakdown(store, tmp_path / "none", platform="cpu-none") is None
    assert predicted_vs_measured(store, tmp_path / "a", platform=a).is_file()
    assert sorted(p.name for p in write_report(store, tmp_path / "b", platform=b)) == [
        "predicted_vs_measured_model.png", "stream_breakdown_model.png"]
    assert write_report(store, tmp_path / "c", platform="cpu-none") == []
