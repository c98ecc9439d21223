"""The report plots: PNG files from stored predictions (none without predictions)."""
from __future__ import annotations

from pmdb import platform as platforms
from simulator.engine import TimedOp, simulate
from simulator.store_rows import ModelUse, Prediction, store_prediction
from report.prediction_figures import predicted_vs_measured, stream_breakdown, write_report
from simulator.semantics import COMM, COMPUTE, SyncHost

PNG = b"\x89PNG\r\n\x1a\n"


def _stored(store, platform: str) -> None:
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "dlrm", "name": "dlrm_test", "config": {}, "config_hash": "h",
                                             "batch_size": 128, "world_size": 2, "sharder": "naive"},
                               returning="workload_id")
        ts = store.insert_one("trace_sets", {"run_id": run.run_id, "platform": platform, "workload_id": wid,
                                             "world_size": 2, "source": "captured", "measured_us": 900.0},
                              returning="trace_set_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 5, "warmup": 1, "measured_us": 1000.0})
    truth = run.run_id
    ops = [TimedOp(kernels=((COMPUTE, 300.0, 0.0, 0.0),)), TimedOp(kernels=((COMM, 200.0, 0.0, 0.0),),
                                                                   is_collective=True)]
    result = simulate([ops, ops], SyncHost())
    with store.run("predict", platform, {}) as run:
        store_prediction(store, run.run_id, Prediction(ts, "model", platform, platform, result, 950.0,
                                                       measured_us=1000.0, workload_run_id=truth,
                                                       models=[ModelUse("m", 1, 2)]))


def test_plots_written(store, tmp_path):
    platform = platforms.ensure_named(store, "cpu-report", device_kind="cpu")
    assert predicted_vs_measured(store, tmp_path) is None  # nothing stored yet
    _stored(store, platform)
    a = predicted_vs_measured(store, tmp_path / "out")
    b = stream_breakdown(store, tmp_path / "out")
    for path in (a, b):
        assert path.is_file() and path.read_bytes()[:8] == PNG and path.stat().st_size > 5000
    assert sorted(p.name for p in write_report(store, tmp_path / "all")) == [
        "predicted_vs_measured_model.png", "stream_breakdown_model.png"]
