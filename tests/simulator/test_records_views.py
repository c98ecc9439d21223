"""Stored predictions with version links, ground truth, and the error views/queries on known numbers."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pmdb import metrics, platform as platforms
from pmdb.errors import PmdbError
from simulator.engine import TimedOp, simulate
from simulator.error_stats import named
from simulator.cross_gpu_range import SpecRange
from simulator.store_rows import ModelUse, Prediction, ground_truth, store_prediction, trace_set_for_run
from simulator.semantics import COMM, COMPUTE, SyncHost

QUERIES = Path(__file__).resolve().parents[2] / "sql" / "queries"


def _set_id(model_set: str) -> str:
    """The short label the views give a model-version set."""
    return "set-" + hashlib.md5(model_set.encode()).hexdigest()[:8]


def _workload(store, platform: str, family: str, world_size: int, measured: list[float]):
    """A workload, a trace set of it and one workload run per measured time; returns (trace_set_id, run ids)."""
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": family, "name": f"{family}_t", "config": {"x": 1},
                                             "config_hash": f"h{family}{world_size}{len(measured)}",
                                             "batch_size": 64, "world_size": world_size, "sharder": "naive"},
                               returning="workload_id")
        ts = store.insert_one("trace_sets", {"run_id": run.run_id, "platform": platform, "label": "t",
                                             "workload_id": wid, "world_size": world_size, "source": "captured",
                                             "measured_us": 999.0}, returning="trace_set_id")
    runs = []
    for value in measured:
        with store.run("workload", platform, {}) as run:
            store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                               "iterations": 5, "warmup": 1, "measured_us": value})
        runs.append(run.run_id)
    return ts, runs


def _result(compute: float = 100.0, comm: float = 40.0):
    ops = [TimedOp(kernels=((COMPUTE, compute, 0.0, 0.0),)),
           TimedOp(kernels=((COMM, comm, 0.0, 0.0),), is_collective=True)]
    return simulate([ops, ops], SyncHost())


def _predict(store, platform, ts, run_id, predicted, measured, models, spec_range=None):
    with store.run("predict", platform, {}) as run:
        pred = Prediction(trace_set_id=ts, mode="model", source_platform=platform, target_platform=platform,
                          result=_result(), predicted_us=predicted, measured_us=measured, workload_run_id=run_id,
                          models=[ModelUse(n, v, 3) for n, v in models], overhead_version=None,
                          unmodelled=[{"op": "aten::foo", "count": 2, "measured_share": 0.01}],
                          spec_range=spec_range)
        return store_prediction(store, run.run_id, pred)


def test_prediction_rows_link_versions_and_ground_truth(store):
    plat = platforms.ensure_named(store, "cpu-test", device_kind="cpu")
    ts, runs = _workload(store, plat, "dlrm", 2, [1000.0])
    assert trace_set_for_run(store, runs[0]) == ts
    run_id, measured = ground_truth(store, ts, plat, "model")
    assert (run_id, measured) == (runs[0], 1000.0)
    assert ground_truth(store, ts, plat, "replay") == (None, 999.0)
    pid = _predict(store, plat, ts, run_id, 1100.0, measured, [("pmdb.cpu-test.bmm.fwd", 3), ("pmdb.a.b.fwd", 1)])
    row = store.query("SELECT * FROM v_predictions WHERE prediction_id = ?", [pid]).iloc[0]
    assert row["model_set"] == "pmdb.a.b.fwd:1,pmdb.cpu-test.bmm.fwd:3"
    assert row["rel_error"] == pytest.approx(0.1)
    assert row["workload_run_id"] == runs[0]
    # the simulated baseline: max over streams of summed kernel time (100 µs compute)
    assert row["baseline_us"] == pytest.approx(100.0)
    links = store.query("SELECT name, version, ops_predicted FROM prediction_models WHERE prediction_id = ? "
                        "ORDER BY name", [pid])
    assert links.values.tolist() == [["pmdb.a.b.fwd", 1, 3], ["pmdb.cpu-test.bmm.fwd", 3, 3]]
    with pytest.raises(PmdbError, match="no completed workload run"):
        trace_set_for_run(store, "nope")


def test_runs_of_one_workload_id_keep_their_own_trace_sets_and_truths(store):
    """Two runs of one workload id (a random sharder's seeds: other plans), each recording its own trace set: a run
    is predicted from its own traces and a trace set judged against its own run, not the workload's latest."""
    plat = platforms.ensure_named(store, "cpu-test", device_kind="cpu")
    wid = store.insert_one("workloads", {"family": "dlrm", "name": "dlrm_t", "config": {"x": 2}, "config_hash": "seeds",
                                         "batch_size": 64, "world_size": 2, "sharder": "random"},
                           returning="workload_id")
    sets, runs = [], []
    for measured in (8400.0, 9400.0):   # the second run is the workload's latest
        with store.run("workload", plat, {}) as run:
            store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": plat,
                                               "iterations": 5, "warmup": 1, "measured_us": measured})
            sets.append(store.insert_one("trace_sets", {"run_id": run.run_id, "platform": plat, "label": "t",
                                                        "workload_id": wid, "world_size": 2, "source": "captured",
                                                        "measured_us": measured * 1.2}, returning="trace_set_id"))
        runs.append(run.run_id)
    assert [trace_set_for_run(store, r) for r in runs] == sets
    assert [ground_truth(store, ts, plat, "model") for ts in sets] == [(runs[0], 8400.0), (runs[1], 9400.0)]
    # an in-context term trained on the first run alone makes the second run's prediction in-sample too (the same
    # workload recorded again), while a prediction that did not use the term stays held out
    store.insert_one("model_versions", {"name": "ctx", "version": 1, "mlflow_run_id": "m", "platform": plat,
                                        "op": "all_to_all", "family": "in_context", "world_size": 2,
                                        "data_runs": [runs[0]]})
    for ts, run_id, models in ((sets[1], runs[1], [("ctx", 1)]), (sets[1], runs[1], [("plain", 1)])):
        _predict(store, plat, ts, run_id, 9000.0, 9400.0, models)
    flags = store.query("SELECT model_set, in_sample FROM v_prediction_errors ORDER BY model_set")
    assert flags.values.tolist() == [["ctx:1", True], ["plain:1", False]]


def test_e2e_error_views_on_known_numbers(store):
    plat = platforms.ensure_named(store, "cpu-test", device_kind="cpu")
    measured = [1000.0, 2000.0, 4000.0]
    predicted = [1050.0, 1900.0, 4400.0]
    set_a = [("m.fc.fwd", 1)]
    set_b = [("m.fc.fwd", 2)]
    ts_ids = []
    for i, (m, p) in enumerate(zip(measured, predicted)):
        ts, runs = _workload(store, plat, "dlrm", 2, [m] * (i + 1))
        ts_ids.append(ts)
        _predict(store, plat, ts, runs[-1], p, m, set_a)
        _predict(store, plat, ts, runs[-1], m * 1.2, m, set_b)
    # a transformer at world size 1 and a prediction of a failed run, which must not count
    ts_t, runs_t = _workload(store, plat, "transformer", 1, [500.0])
    _predict(store, plat, ts_t, runs_t[0], 510.0, 500.0, set_a)
    with pytest.raises(RuntimeError):
        with store.run("predict", plat, {}) as run:
            store_prediction(store, run.run_id, Prediction(
                trace_set_id=ts_t, mode="model", source_platform=plat, target_platform=plat, result=_result(),
                predicted_us=5000.0, measured_us=500.0, workload_run_id=runs_t[0], models=[ModelUse("x", 9, 1)]))
            raise RuntimeError("simulated failure")

    errs = store.query("SELECT * FROM v_e2e_errors ORDER BY family, model_set_id")
    dlrm_a = errs[(errs.family == "dlrm") & (errs.model_set_id == _set_id("m.fc.fwd:1"))].iloc[0]
    assert dlrm_a["n"] == 3 and dlrm_a["world_size"] == 2 and dlrm_a["mode"] == "model"
    assert dlrm_a["geomean_abs_error"] == pytest.approx(metrics.gmae(predicted, measured))
    assert dlrm_a["min_abs_error"] == pytest.approx(0.05)
    assert dlrm_a["max_abs_error"] == pytest.approx(0.1)
    assert dlrm_a["mape"] == pytest.approx(metrics.mape(predicted, measured))
    assert dlrm_a["baseline_geomean_abs_error"] == pytest.approx(metrics.gmae([100.0] * 3, measured))
    dlrm_b = errs[(errs.family == "dlrm") & (errs.model_set_id == _set_id("m.fc.fwd:2"))].iloc[0]
    assert dlrm_b["geomean_abs_error"] == pytest.approx(metrics.gmae([1.2], [1.0]))
    trans = errs[errs.family == "transformer"]
    assert len(trans) == 1 and trans.iloc[0]["n"] == 1  # the failed run's prediction is not there
    assert trans.iloc[0]["geomean_abs_error"] == pytest.approx(metrics.gmae([510.0], [500.0]))

    side = store.query((QUERIES / "model_sets_side_by_side.sql").read_text())
    assert len(side) == 3
    assert side["error_a_pct"].tolist() == pytest.approx([5.0, -5.0, 10.0])
    assert side["error_b_pct"].tolist() == pytest.approx([20.0, 20.0, 20.0])
    vs = store.query((QUERIES / "prediction_vs_baseline.sql").read_text())
    assert len(vs) == 7
    keys = ["platform", "family", "workload", "world_size", "batch_size", "mode", "model_set_id"]
    assert vs.duplicated(keys).any()                     # ties: the three DLRM runs of one model set
    ordered = vs.sort_values([*keys, "prediction_id"], kind="stable")
    assert vs["prediction_id"].tolist() == ordered["prediction_id"].tolist()   # ties in the order they were made
    assert set(vs["baseline_ms"]) == {0.1}
    e2e = store.query((QUERIES / "e2e_errors.sql").read_text())
    assert len(e2e) == 3


def test_repeated_prediction_counts_once(store):
    plat = platforms.ensure_named(store, "cpu-test", device_kind="cpu")
    ts, runs = _workload(store, plat, "dlrm", 1, [1000.0])
    _predict(store, plat, ts, runs[0], 1300.0, 1000.0, [("m", 1)])
    _predict(store, plat, ts, runs[0], 1100.0, 1000.0, [("m", 1)])  # the latest one counts
    errs = store.query("SELECT * FROM v_e2e_errors")
    assert errs.iloc[0]["n"] == 1
    assert errs.iloc[0]["max_abs_error"] == pytest.approx(0.1)


def test_spec_range_coverage_query_on_known_numbers(store):
    """Stored ranges (the prediction and each held-out GPU's step) and the named query that counts truths inside."""
    gpu = platforms.ensure_named(store, "gpu-spec", device_kind="cuda")
    ts, runs = _workload(store, gpu, "transformer", 1, [1000.0, 1500.0, 700.0])
    _predict(store, gpu, ts, runs[0], 900.0, 1000.0, [("m", 1)], SpecRange({"a": 800.0, "b": 1200.0}, 0.9))
    _predict(store, gpu, ts, runs[1], 900.0, 1500.0, [("m", 1)], SpecRange({"a": 800.0, "b": 1200.0}, 0.9))
    _predict(store, gpu, ts, runs[2], 900.0, 700.0, [("m", 1)], SpecRange({"a": 1000.0, "b": 1200.0}, 0.9))
    _predict(store, gpu, ts, runs[2], 900.0, 700.0, [("m", 1)], SpecRange({"a": 600.0, "b": 1200.0}, 0.9))  # latest
    _predict(store, gpu, ts, None, 900.0, 1000.0, [("m", 1)])                           # no range: not counted
    stored = store.query("SELECT range_low_us, range_high_us, range_detail::VARCHAR AS d FROM predictions "
                         "WHERE range_low_us IS NOT NULL ORDER BY prediction_id")
    assert stored["range_low_us"].tolist() == [800.0, 800.0, 900.0, 600.0]   # the prediction counts as an end
    assert stored["range_high_us"].tolist() == [1200.0] * 4
    assert '"per_gpu_us": {"a": 800.0, "b": 1200.0}' in stored["d"].iloc[0]
    row = store.query((QUERIES / "spec_range_coverage.sql").read_text()).iloc[0]
    assert (row["platform"], row["n"], row["within"]) == (gpu, 3, 2)        # 1000 and 700 inside, 1500 outside
    assert (row["low_pct"], row["high_pct"]) == (-11.1, 33.3)
    assert named(store, "spec_range_coverage")["within"].tolist() == [2]     # what `pmdb errors --what ranges` prints


def test_kernel_error_view_and_query(store):
    plat = platforms.ensure_named(store, "cpu-test", device_kind="cpu")
    with store.run("fit", plat, {}) as run:
        for version, gmae in ((1, 0.12), (2, 0.07)):
            store.insert_one("model_versions", {
                "name": "pmdb.cpu-test.bmm.fwd", "version": version, "mlflow_run_id": f"m{version}",
                "run_id": run.run_id, "platform": plat, "op": "bmm", "pass": "fwd", "family": "mlp",
                "test_gmae": gmae, "test_mape": gmae * 1.5, "test_std": 0.01, "n_train": 80, "n_test": 20})
    store.insert_one("model_aliases", {"name": "pmdb.cpu-test.bmm.fwd", "alias": "champion", "version": 2})
    frame = store.query((QUERIES / "kernel_errors.sql").read_text())
    assert frame["version"].tolist() == [1, 2]
    assert frame["test_gmae_pct"].tolist() == pytest.approx([12.0, 7.0])
    assert frame["aliases"].tolist()[1] == "champion"
