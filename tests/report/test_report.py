"""``pmdb report`` on a small real store: every section id is on the page, the figures exist with sane pixel sizes
and draw the expected series, the stated warnings and notes appear (indistinguishable plans, a baseline beating the
model, a collective model that jumps, collectives without a curve), and sections without data say which command
produces it."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fitters import collective
from fitters.evaluate import error_histogram
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store
from report import checks
from report.build import SECTION_IDS, build_report
from report.figures import series_of
from report.kernel_figures import kernel_error_dots, summarise
from simulator.engine import TimedOp, simulate
from simulator.semantics import COMM, COMPUTE, SyncHost
from simulator.store_rows import Prediction, store_prediction

PLATFORM = "report-cpu"
ROOT = Path(__file__).resolve().parents[2]
KERNEL_FIGURE_MAX_PX = 1500


def _model(store, run_id: str, name: str, op: str, pass_: str | None, world: int | None, family: str,
           version: int, gmae: float, params: dict | None, champion: bool, mlflow_run: str = "m") -> None:
    rng = np.random.default_rng(version)
    measured = rng.uniform(10, 100, 10)
    store.insert_one("model_versions", {
        "name": name, "version": version, "mlflow_run_id": mlflow_run, "run_id": run_id, "platform": PLATFORM,
        "op": op, "pass": pass_, "world_size": world, "family": family, "cache_state": "cold" if pass_ else None,
        "test_gmae": gmae, "test_mape": gmae * 1.2, "n_train": 40, "n_test": 10,
        "test_error_hist": error_histogram(measured * rng.uniform(0.85, 1.15, 10), measured), "params": params})
    if champion:
        store.insert_one("model_aliases", {"name": name, "alias": "champion", "version": version})


_PLACEMENTS = {"naive": [0, 1, 0, 1], "size_greedy": [0, 0, 1, 1], "lookup_greedy": [1, 0, 0, 1]}  # tables' ranks


def _workload(store, sharder: str, family: str = "dlrm", name: str = "task1", world: int = 2) -> int:
    return store.insert_one("workloads", {
        "family": family, "name": name, "config": {"tables": 4}, "config_hash": f"{name}-{sharder}",
        "batch_size": 64, "world_size": world, "sharder": sharder if family == "dlrm" else None,
        "sharding": _PLACEMENTS.get(sharder, [0, 1, 0, 1]) if family == "dlrm" else None}, returning="workload_id")


def _prediction(store, wid: int, label: str, predicted: float, measured: float | None, compute_us: float,
                spread: float | None = None, iterations: list[float] | None = None) -> int:
    """A prediction judged against a stored workload run (``measured`` None: 2% above the baseline)."""
    ops = [TimedOp(kernels=((COMPUTE, compute_us, 0.0, 0.0),)),
           TimedOp(kernels=((COMM, 50.0, 0.0, 0.0),), is_collective=True)]
    result = simulate([ops, ops], SyncHost())
    measured = measured if measured is not None else 1.02 * result.baseline_us
    with store.run("workload", PLATFORM, {}) as run:
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": PLATFORM,
                                           "iterations": len(iterations or [0] * 5), "warmup": 1,
                                           "measured_us": measured, "spread": spread})
        if iterations:
            store.insert("e2e_measurements", [{"run_id": run.run_id, "iteration": i, "rank": r, "time_us": t - r}
                                              for i, t in enumerate(iterations) for r in (0, 1)])
    truth = run.run_id
    with store.run("predict", PLATFORM, {}) as run:
        ts = store.insert_one("trace_sets", {"run_id": run.run_id, "platform": PLATFORM, "label": label,
                                             "workload_id": wid, "world_size": 2, "source": "derived"},
                              returning="trace_set_id")
        pred = Prediction(trace_set_id=ts, mode="model", source_platform=PLATFORM, target_platform=PLATFORM,
                          result=result, predicted_us=predicted, measured_us=measured, workload_run_id=truth)
        return store_prediction(store, run.run_id, pred)


@pytest.fixture(scope="session")
def small_store_template(tmp_path_factory, empty_workspace) -> tuple[Workspace, int]:
    """(workspace, study id) of :func:`small_store`, built once per test run (shared by the workers,
    :func:`harness.built_once`; about 1.6 s of CPU, a copy a few milliseconds). Read only: tests copy it."""
    from harness import built_once, copy_workspace

    def build(folder: Path) -> None:
        ws = Workspace(copy_workspace(empty_workspace.home, folder / "ws"))
        with Store.open(ws) as store:
            (folder / "study").write_text(str(_fill_small_store(store, ws)))
    folder = built_once(tmp_path_factory, "report_small_store", build)
    return Workspace(folder / "ws"), int((folder / "study").read_text())


@pytest.fixture
def small_store(tmp_path, small_store_template):
    """(store, study id): this test's own copy of :func:`small_store_template`, opened."""
    from harness import copy_workspace

    template, study = small_store_template
    with Store.open(Workspace(copy_workspace(template.home, tmp_path / "ws"))) as store:
        yield store, study


def _fill_small_store(store, workspace) -> int:
    """Kernel models (two names, two families each; one scatter artifact on disk), collectives (all_to_all fitted
    with all_to_allv test points, all_gather with a jumping model, reduce_scatter points only), three DLRM plans
    (two predicted within 0.5% but measured 26% apart), one transformer run the baseline predicts better, one
    validated sharding study: written into ``store`` (of ``workspace``); the study id."""
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    rng = np.random.default_rng(3)
    sizes = 2.0 ** np.arange(4, 24)
    times = 60.0 + sizes / 1.5e3 * (1 + 0.05 * rng.standard_normal(sizes.size))
    fitted = collective.fit("all_to_all", 2, sizes, times)
    jumpy = collective.CollectiveModel("all_gather", 2, collective.CollectiveParams.continuous(
        2.0 ** 10, 2.0 ** 16, 60.0, 1.5, 20.0, 60.0, collective.bus_factor("all_gather", 2)))
    plot = workspace.mlflow_artifacts / PLATFORM / "run-fc" / "artifacts" / "plots" / "fc.scatter.png"
    plot.parent.mkdir(parents=True)
    Image.new("RGB", (20, 20)).save(plot)
    with store.run("fit", PLATFORM, {}) as run:
        for op, gm in (("fully_connected", 0.08), ("embedding_lookup", 0.30)):
            name = f"pmdb.{PLATFORM}.{op}.fwd.cold"
            _model(store, run.run_id, name, op, "fwd", None, "roofline", 1, gm * 2, {}, False)
            _model(store, run.run_id, name, op, "fwd", None, "mlp", 2, gm, {"width": 64}, True,
                   "run-fc" if op == "fully_connected" else "m")
        _model(store, run.run_id, f"pmdb.{PLATFORM}.all_to_all.ws2", "all_to_all", None, 2, "sigmoid", 1, 0.12,
               fitted.describe(), True)
        _model(store, run.run_id, f"pmdb.{PLATFORM}.all_gather.ws2", "all_gather", None, 2, "sigmoid", 1, 0.3,
               jumpy.describe(), True)
    with store.run("comms", PLATFORM, {}) as run:
        store.insert("collective_measurements", [{
            "run_id": run.run_id, "platform": PLATFORM, "collective": c, "backend": "gloo", "world_size": 2,
            "split_kind": "random" if c == "all_to_allv" else "equal", "total_bytes": int(2 * s),
            "max_rank_bytes": int(s), "lat_p50_us": float(t) * (1.1 if c == "all_to_allv" else 1.0),
            "source": "measured"}
            for c in ("all_to_all", "all_to_allv", "all_gather", "reduce_scatter") for s, t in zip(sizes, times)])
    with store.run("workload", PLATFORM, {}) as run:
        ids = {s: _workload(store, s) for s in ("naive", "size_greedy", "lookup_greedy")}
        bert = _workload(store, "-", "transformer", "bert", 2)
    steady = [940.0, 945.0, 950.0, 955.0, 960.0, 1000.0]
    preds = {"naive": _prediction(store, ids["naive"], "naive", 1100.0, 1000.0, 300.0, spread=0.2),
             "size_greedy": _prediction(store, ids["size_greedy"], "size_greedy", 900.0, 950.0, 250.0,
                                        iterations=steady),
             "lookup_greedy": _prediction(store, ids["lookup_greedy"], "lookup_greedy", 902.0, 1200.0, 250.0)}
    _prediction(store, bert, "bert", 2000.0, None, 900.0, spread=0.05)
    with store.run("shard", PLATFORM, {}) as run:
        study = store.insert_one("shard_studies", {
            "run_id": run.run_id, "platform": PLATFORM, "world_size": 2, "batch_size": 64, "config": {"tables": []},
            "series": "unit", "trace_origin": "captured:1", "capture_s": 4.0, "predict_s": 1.5,
            "chosen": "size_greedy", "fastest": "size_greedy", "chosen_slowdown": 0.0, "success": True,
            "validate_s": 60.0}, returning="study_id")
        store.insert("shard_plans", [
            {"study_id": study, "sharder": s, "plan": [0, 1, 0, 1], "position": k, "predicted_us": p,
             "measured_us": m, "prediction_id": preds[s], "predict_s": 0.7}
            for k, (s, p, m) in enumerate((("size_greedy", 900.0, 950.0), ("lookup_greedy", 902.0, 1200.0),
                                           ("naive", 1100.0, 1000.0)), 1)])
    return study


def _section(page: str, key: str) -> str:
    return page.split(f"<section id='{key}'>")[1].split("</section>")[0]


def test_report_sections_figures_and_warnings(small_store, tmp_path):
    store, study = small_store
    with store.run("ops", PLATFORM, {}) as run:   # the op sweeps' wake probes: a large loss is said
        run.summary = {"wake_probe": [{"op": "linear 512x64->256", "spin_us": 2000.0, "back_to_back_us": 220.0,
                                       "lost_us": lost} for lost in (250.0, 270.0)]}
    out = tmp_path / "out"
    made = build_report(store, out, PLATFORM)
    page = made.page.read_text()
    assert [s.key for s in made.sections] == list(SECTION_IDS)
    for key in SECTION_IDS:
        assert len(re.sub("<[^>]+>", "", _section(page, key)).strip()) > 40
    names = {p.name for p in made.figures}
    assert {"kernel_errors.png", "collective_curves.png", "predicted_vs_measured_model.png",
            "stream_breakdown_model.png", "shard_plans.png"} == names
    for path in made.figures:
        with Image.open(path) as image:
            width, height = image.size
        assert 300 < width <= 1300 and 150 < height < 3000, (path.name, image.size)
        assert f"src='{path.name}'" in page
    with Image.open(out / "kernel_errors.png") as image:
        assert image.size[1] < KERNEL_FIGURE_MAX_PX
    assert series_of(out / "kernel_errors.png") == [f"pmdb.{PLATFORM}.embedding_lookup.fwd.cold",
                                                    f"pmdb.{PLATFORM}.fully_connected.fwd.cold"]  # worst first
    assert series_of(out / "collective_curves.png") == [
        "all_gather ws2 measured equal", "all_gather ws2 fitted", "all_gather ws2 jump at 65536",
        "all_to_all ws2 measured equal", "all_to_allv ws2 measured random", "all_to_all ws2 fitted",
        "reduce_scatter ws2 measured equal"]
    assert made.missing == {"planner": made.missing["planner"]} and "pmdb plan sweep" in made.missing["planner"]
    assert "<script" not in page

    kernels = _section(page, "kernel_models")
    link = re.search(r"href='([^']*fc\.scatter\.png)'", kernels).group(1)
    assert (out / link).resolve().is_file()
    assert "mlp v2" in kernels and "roofline 16.0" in kernels  # the champion and the other family's GMAE

    colls = _section(page, "collectives")
    assert "all_gather ws2 v1: the fitted model itself jumps at m2" in colls
    assert "all_to_allv ws2: no curve of its own by design" in colls
    assert "reduce_scatter ws2: measured points but no fitted curve" in colls and "pmdb fit --op" in colls
    assert "<td>12</td>" in colls.split("held-out errors and fitted parameters")[1]  # all_to_all test GMAE %

    preds = _section(page, "predictions")
    assert re.search(r"task1 b64 ws2 \(model\): plans are indistinguishable to the model: size_greedy, "
                     r"lookup_greedy are predicted within 0.5%", preds)
    assert "transformer ws2 (model): the baseline (sum of kernel times) beats the model" in preds
    assert "dlrm ws2 (model): the baseline" not in preds
    assert "0.943-0.98<" in preds  # p10-p90 of the per-iteration max over ranks (ms)
    assert "1 run(s) have no measured spread" in preds  # lookup_greedy: neither spread nor iterations
    assert f"{PLATFORM}: vector wake-up not priced: right after 2 ms of scalar work a linear 512x64-&gt;256 loses " \
           "260 µs" in preds
    shard = _section(page, "sharding")
    assert f"study {study}: plans are indistinguishable to the model: size_greedy, lookup_greedy" in shard
    rate = shard.split("success rate per series")[1].split("</table>")[0]
    assert "100" in rate and "unit" in rate


def test_kernel_view_height_is_bounded_for_many_models(tmp_path):
    rng = np.random.default_rng(0)
    rows = []
    for i in range(100):  # 100 rows per panel: more than fit at the preferred row height
        for cache in ("warm", "cold"):
            for version, family in enumerate(("roofline", "mlp", "gbdt"), 1):
                rows.append({"platform": "p", "name": f"pmdb.p.op{i}.fwd.{cache}", "op": f"op{i}", "pass": "fwd",
                             "cache_state": cache, "implementation": "torch", "dtype": "float32",
                             "family": family, "version": version, "test_gmae": rng.uniform(0.01, 2.0),
                             "test_mape": 0.1, "n_train": 9, "n_test": 3, "mlflow_run_id": "m",
                             "is_champion": version == 2})
    shown = summarise(pd.DataFrame(rows))
    assert len(shown) == 200 and shown["is_champion"].all()
    assert shown.groupby("cache_state")["test_gmae"].apply(lambda s: s.is_monotonic_decreasing).all()
    path = kernel_error_dots(shown, tmp_path / "k.png")
    with Image.open(path) as image:
        assert image.size[1] < KERNEL_FIGURE_MAX_PX and image.size[0] <= 1300


def test_checks():
    frame = pd.DataFrame({"g": ["a"] * 4 + ["b"] * 2, "plan": ["p1", "p2", "p3", "p4", "q1", "q2"],
                          "predicted_us": [1000.0, 1004.0, 1020.0, 2000.0, 500.0, 501.0],
                          "measured_us": [1000.0, 1150.0, 1000.0, 1000.0, 500.0, 520.0]})
    said, flagged = checks.indistinguishable(frame, ["g"], "plan")
    assert flagged == {0, 1} and len(said) == 1 and "p1, p2" in said[0] and "+15%" in said[0]
    frame["tables"] = ["[0]", "[0]", "[0, 1]", "[1]", "[0, 1]", "[1, 0]"]   # p1 and p2 place the tables alike
    said, flagged = checks.indistinguishable(frame, ["g"], "plan", placement="tables")
    assert flagged == set() and len(said) == 1 and "indistinguishable" not in said[0]
    assert "p1, p2 make the same plan ([0]): one configuration measured 2 times" in said[0] and "noise" in said[0]
    frame.loc[1, "tables"] = "[1]"                                            # different plans: the model's fault
    assert checks.indistinguishable(frame, ["g"], "plan", placement="tables")[1] == {0, 1}
    frame["baseline_us"] = [1000.0, 1100.0, 1000.0, 1000.0, 400.0, 400.0]
    assert [s.split(":")[0] for s in checks.baseline_beats_model(frame, ["g"])] == ["a"]
    flat = collective.CollectiveParams.continuous(1024.0, 65536.0, 60.0, 1.5, 20.0, 60.0, 0.5)
    smooth = collective.CollectiveParams.continuous(1024.0, 65536.0, 60.0, 1.5, 1.0, 13.0, 0.5)
    assert [b for b, _, _ in checks.curve_jumps(collective.curve, flat, 0.5, (flat.m1, flat.m2))] == [65536.0]
    assert checks.curve_jumps(collective.curve, smooth, 0.5, (smooth.m1, smooth.m2)) == []


def test_other_platform_and_empty_store_say_what_is_missing(small_store, tmp_path):
    store, _ = small_store
    platforms.ensure_named(store, "elsewhere", device_kind="cpu")
    made = build_report(store, tmp_path / "other", "elsewhere")
    assert set(made.missing) == set(SECTION_IDS)
    assert "pmdb collect comms" in made.missing["collectives"] and "pmdb shard" in made.missing["sharding"]
    assert "pmdb predict --all" in made.missing["predictions"] and "pmdb fit --all" in made.missing["kernel_models"]
    page = made.page.read_text()
    assert all(f"<section id='{key}'>" in page for key in SECTION_IDS)


def test_cli_report_writes_to_reports_and_draws_a_planner_sweep(workspace, tmp_path, capsys):
    home = str(workspace.home)
    assert main(["--home", home, "report"]) == 0
    page = (workspace.home / "reports" / "index.html").read_text()
    assert page.count("not run yet: ") == len(SECTION_IDS) and "Missing" not in page and "pmdb fit --all" in page
    assert "<p class='notyet'>not run yet: `pmdb collect ops`, then `pmdb fit --all` (no fitted kernel models)" in page
    assert "wrote" in capsys.readouterr().out
    assert main(["--home", home, "report", "--platform", "nowhere"]) == 2
    assert main(["--home", home, "plan", "sweep", "--model", "gpt2-345m", "--gpus", "8,16", "--global-batch", "64",
                 "--systems", "a100", "--quiet"]) == 0
    out = tmp_path / "rep"
    assert main(["--home", home, "report", "-o", str(out)]) == 0
    planner = _section((out / "index.html").read_text(), "planner")
    assert "not run yet" not in planner and "src='planner_sweep.png'" in planner
    with Image.open(out / "planner_sweep.png") as image:
        assert image.size[1] < 1000


def _screenshot_script():
    spec = importlib.util.spec_from_file_location("report_screenshot", ROOT / "benchmarks" / "report_screenshot.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_screenshot_script_without_chromium_and_its_checks(tmp_path, monkeypatch, capsys):
    script = _screenshot_script()
    monkeypatch.setenv("PATH", str(tmp_path))  # no chromium here
    assert script.main([str(tmp_path)]) == 2
    assert "chromium not found" in capsys.readouterr().err
    good = {"height": 4000, "images": [{"src": "a.png", "width": 900, "shown": 500}],
            "sections": {k: {"height": 100, "text": 50} for k in SECTION_IDS}}
    assert script.check(good, 6000) == []
    bad = {**good, "height": 7000, "sections": {**good["sections"], "planner": {"height": 0, "text": 0}}}
    del bad["sections"]["sharding"]
    assert script.check(bad, 6000) == ["page is 7000 px tall (bound 6000)", "section #sharding not rendered",
                                       "section #planner is empty"]
