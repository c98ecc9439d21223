"""``pmdb report`` on a small real store: every figure file exists and draws the expected series; an empty store
gives a page that says what is missing."""
from __future__ import annotations

import numpy as np
import pytest

from fitters import collective
from fitters.evaluate import error_histogram
from pmdb import platform as platforms
from pmdb.cli.main import main
from report.build import build_report
from report.figures import series_of
from simulator.engine import TimedOp, simulate
from simulator.store_rows import Prediction, store_prediction
from simulator.semantics import COMM, COMPUTE, SyncHost

PLATFORM = "report-cpu"


def _model(store, run_id: str, name: str, op: str, pass_: str | None, world: int | None, family: str,
           hist: dict | None, params: dict | None) -> None:
    store.insert_one("model_versions", {
        "name": name, "version": 1, "mlflow_run_id": "m", "run_id": run_id, "platform": PLATFORM, "op": op,
        "pass": pass_, "world_size": world, "family": family, "cache_state": "cold" if pass_ else None,
        "test_gmae": 0.08, "test_mape": 0.1, "n_train": 40, "n_test": 10, "test_error_hist": hist,
        "params": params})
    store.insert_one("model_aliases", {"name": name, "alias": "champion", "version": 1})


def _prediction(store, wid: int, sharder: str, predicted: float, measured: float, per_rank_compute: float) -> int:
    with store.run("predict", PLATFORM, {}) as run:
        ts = store.insert_one("trace_sets", {"run_id": run.run_id, "platform": PLATFORM, "label": sharder,
                                             "workload_id": wid, "world_size": 2, "source": "derived"},
                              returning="trace_set_id")
        ops = [TimedOp(kernels=((COMPUTE, per_rank_compute, 0.0, 0.0),)),
               TimedOp(kernels=((COMM, 50.0, 0.0, 0.0),), is_collective=True)]
        pred = Prediction(trace_set_id=ts, mode="model", source_platform=PLATFORM, target_platform=PLATFORM,
                          result=simulate([ops, ops], SyncHost()), predicted_us=predicted, measured_us=measured)
        return store_prediction(store, run.run_id, pred)


@pytest.fixture
def small_store(store):
    """Two kernel models, an all_to_all curve with its points, two DLRM plans predicted and measured, and one
    validated sharding study."""
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    rng = np.random.default_rng(3)
    measured = rng.uniform(10, 100, 40)
    sizes = 2.0 ** np.arange(4, 24)
    times = 60.0 + sizes / 1.5e3 * (1 + 0.05 * rng.standard_normal(sizes.size))
    fitted = collective.fit("all_to_all", 2, sizes, times)
    with store.run("fit", PLATFORM, {}) as run:
        for op in ("fully_connected", "embedding_lookup"):
            hist = error_histogram(measured * rng.uniform(0.85, 1.15, 40), measured)
            _model(store, run.run_id, f"pmdb.{PLATFORM}.{op}.fwd", op, "fwd", None, "mlp", hist, {"width": 64})
        _model(store, run.run_id, f"pmdb.{PLATFORM}.all_to_all.ws2", "all_to_all", None, 2, "sigmoid", None,
               fitted.describe())
    with store.run("comms", PLATFORM, {}) as run:
        store.insert("collective_measurements", [{
            "run_id": run.run_id, "platform": PLATFORM, "collective": "all_to_all", "backend": "gloo",
            "world_size": 2, "split_kind": "equal", "total_bytes": int(2 * s), "max_rank_bytes": int(s),
            "lat_p50_us": float(t), "source": "measured"} for s, t in zip(sizes, times)])
    ids = {}
    with store.run("workload", PLATFORM, {}) as run:
        for sharder in ("naive", "size_greedy"):
            ids[sharder] = store.insert_one("workloads", {
                "family": "dlrm", "name": "task1", "config": {"tables": 4}, "config_hash": sharder,
                "batch_size": 64, "world_size": 2, "sharder": sharder, "sharding": [0, 1, 0, 1]},
                returning="workload_id")
    preds = {"naive": _prediction(store, ids["naive"], "naive", 1100.0, 1000.0, 300.0),
             "size_greedy": _prediction(store, ids["size_greedy"], "size_greedy", 900.0, 950.0, 250.0)}
    with store.run("shard", PLATFORM, {}) as run:
        study = store.insert_one("shard_studies", {
            "run_id": run.run_id, "platform": PLATFORM, "world_size": 2, "batch_size": 64, "config": {"tables": []},
            "series": "unit", "trace_origin": "captured:1", "capture_s": 4.0, "predict_s": 1.5,
            "chosen": "size_greedy", "fastest": "size_greedy", "chosen_slowdown": 0.0, "success": True,
            "validate_s": 60.0}, returning="study_id")
        store.insert("shard_plans", [
            {"study_id": study, "sharder": s, "plan": [0, 1, 0, 1], "position": k, "predicted_us": p,
             "measured_us": m, "prediction_id": preds[s], "predict_s": 0.7}
            for k, (s, p, m) in enumerate((("size_greedy", 900.0, 950.0), ("naive", 1100.0, 1000.0)), 1)])
    return store, study


def test_report_draws_every_series(small_store, tmp_path):
    store, study = small_store
    made = build_report(store, tmp_path / "out", PLATFORM)
    names = {p.name for p in made.figures}
    assert {"kernel_errors.png", "collective_curves.png", "predicted_vs_measured_model.png",
            "stream_breakdown_model.png", "shard_plans.png"} <= names
    assert all(p.is_file() and p.stat().st_size > 5000 for p in made.figures)
    assert series_of(tmp_path / "out" / "kernel_errors.png") == [f"pmdb.{PLATFORM}.embedding_lookup.fwd",
                                                                 f"pmdb.{PLATFORM}.fully_connected.fwd"]
    assert series_of(tmp_path / "out" / "collective_curves.png") == ["all_to_all ws2 measured equal",
                                                                     "all_to_all ws2 fitted"]
    assert series_of(tmp_path / "out" / "shard_plans.png") == [f"study {study}"]
    page = made.page.read_text()
    assert made.missing == {} and "Missing" not in page
    assert "size_greedy" in page and "Table IV" in page and "<script" not in page
    for figure in names:
        assert f"src='{figure}'" in page
    rate = page.split("success rate per series")[1]
    assert "100" in rate.split("</table>")[0] and "unit" in rate.split("</table>")[0]


def test_other_platform_and_empty_store_say_what_is_missing(small_store, tmp_path):
    store, _ = small_store
    platforms.ensure_named(store, "elsewhere", device_kind="cpu")
    made = build_report(store, tmp_path / "other", "elsewhere")
    assert {"kernel_models", "collectives", "sharding"} <= set(made.missing)
    assert "pmdb collect comms" in made.missing["collectives"] and "pmdb shard" in made.missing["sharding"]
    assert "Missing" in made.page.read_text()


def test_cli_report_on_an_empty_workspace(workspace, tmp_path, capsys):
    out = tmp_path / "rep"
    assert main(["--home", str(workspace.home), "report", "-o", str(out)]) == 0
    page = (out / "index.html").read_text()
    assert page.count("Missing:") >= 4 and "pmdb fit" in page
    assert "wrote" in capsys.readouterr().out
    assert main(["--home", str(workspace.home), "report", "--platform", "nowhere", "-o", str(out)]) == 2
