"""The collectives' in-context term on a real 2-rank gloo recording: fitted against a plain curve that is far too
fast, it scales the curve up, is scored on a held-out trace set, registered, used by predict by default and left
out with the plain switch."""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # spawned ranks import the recording helper by name

from collectors.traces.ingest import RankTraces, ingest_trace_set  # noqa: E402
from fitters.collective import CollectiveParams, bus_factor, curve  # noqa: E402
from fitters.collective_context import (  # noqa: E402
    ContextOptions, Factor, context_model_name, end_lag, fit_factor, fit_group, fit_in_context, rank_work,
    traced_collectives)
from fitters.fit import FitOptions, fit_models  # noqa: E402
from pmdb import platform as platforms  # noqa: E402
from pmdb.config import Workspace  # noqa: E402
from pmdb.store import Store  # noqa: E402
from pmdb.traces.graph import Kernel, Op, RankGraph, Stream  # noqa: E402
from simulator.model_set import load_model_set  # noqa: E402

from harness import copy_workspace  # noqa: E402

from .conftest import cli, one_line_error  # noqa: E402

# a plain curve ~100x faster than any gloo collective on this host (t_s 0.6 µs): traced times exceed it
FAST = dict(m1=2.0 ** 14, m2=2.0 ** 23, t_s=0.6, bw_max=150.0, k=0.9, x0=18.5)


@pytest.fixture(scope="module")
def gloo_files(gloo_traces) -> Path:
    """Per rank of the 2-rank gloo program (all_reduce, all_to_all_single; 3 marked iterations): Kineto and ET
    (tests/conftest.py's recording, made once per test run)."""
    return gloo_traces


def _store_set(store: Store, platform: str, files: Path, label: str) -> int:
    ranks = [RankTraces(r, files / f"kineto_{r}.json", files / f"et_{r}.json") for r in (0, 1)]
    with store.run("trace", platform, {"label": label}) as run:
        return ingest_trace_set(store, run.run_id, platform, ranks, label=label, source="captured")


def _fast_curves(store: Store, platform: str, synthetic) -> None:
    sizes = 2.0 ** np.arange(2, 27)
    for collective in ("all_reduce", "all_to_all"):
        params = CollectiveParams.continuous(**FAST, mul=bus_factor(collective, 2))
        synthetic.insert_collectives(store, collective, 2, sizes, curve(params, bus_factor(collective, 2), sizes),
                                     platform=platform)


@pytest.fixture(scope="module")
def context_template(tmp_path_factory, mlflow_template, gloo_files, synthetic):
    """(workspace, platform, trace set ids): this machine's platform with fast plain curves fitted (champions) and
    the gloo recording stored as two trace sets. Built once per module; tests get copies (:func:`context_store`)."""
    workspace = Workspace(tmp_path_factory.mktemp("context") / "ws")
    Store.open(workspace, create=True).close()
    shutil.copy(mlflow_template.mlflow_db, workspace.mlflow_db)
    with Store.open(workspace) as store:
        platform = platforms.resolve(store, None)
        _fast_curves(store, platform, synthetic)
        fit_models(store, workspace, platform, FitOptions(family="sigmoid", progress=False))
        sets = [_store_set(store, platform, gloo_files, f"gloo{i}") for i in (1, 2)]
    return workspace, platform, sets


@pytest.fixture
def context_store(context_template, tmp_path):
    """(store, platform, trace set ids) of this test's own copy of :func:`context_template`."""
    template, platform, sets = context_template
    workspace = Workspace(copy_workspace(template.home, tmp_path / "ws"))
    with Store.open(workspace) as store:
        yield store, platform, sets


def test_fit_scales_a_too_fast_curve_up_and_scores_a_held_out_trace_set(context_store):
    store, platform, sets = context_store
    rows = traced_collectives(store, platform, lambda world, threads: False)
    assert set(rows["collective"]) == {"all_reduce", "all_to_all"} and set(rows["trace_set_id"]) == set(sets)
    assert (rows["traced_us"] > 0).all() and (rows["max_rank_bytes"] == 256).all()  # 64 floats per rank

    results, notes = fit_in_context(store, store.workspace, platform, lambda world, threads: False)
    assert not notes
    reduce = results.set_index("collective").loc["all_reduce"]
    assert reduce["factor"] > 1.0                                   # traced durations exceed the plain curve
    assert reduce["n_test"] > 0 and reduce["n_train"] > 0           # one set trained, the other scored
    # the plain curve is ~100x too fast: the scaled size term is nearer the held-out work. (The whole model's
    # per-call test_gmae adds the training rows' mean stall, and this 2-core host under the suite's load stalls a
    # call by 4-6 ms now and then: CI once scored all_reduce 2.85 against the plain curve's 0.997. Not asserted.)
    for group in results.itertuples():
        assert group.work_gmae < group.plain_work_gmae and group.plain_work_gmae > 0.9, group
    assert np.isfinite(reduce["replicate_gmae"]) and np.isfinite(reduce["test_gmae"])
    name = context_model_name(platform, "all_reduce", 2)
    version = store.query("SELECT m.version, m.family, m.test_gmae, m.world_size FROM model_versions m JOIN "
                          "model_aliases a USING (name, version) WHERE a.name = ? AND a.alias = 'champion'", [name])
    assert version.at[0, "family"] == "in_context" and version.at[0, "world_size"] == 2
    assert version.at[0, "test_gmae"] == pytest.approx(reduce["test_gmae"])
    run_id = store.scalar("SELECT mlflow_run_id FROM model_versions WHERE name = ?", [name])
    assert list(store.workspace.mlflow_artifacts.glob(f"*/{run_id}/artifacts/plots/*.scatter.png"))


def test_predict_prices_with_the_term_and_the_plain_switch_leaves_it_out(context_store):
    store, platform, sets = context_store
    fit_in_context(store, store.workspace, platform, lambda world, threads: False, ContextOptions(seed=0))
    context, plain = load_model_set(store, platform), load_model_set(store, platform, "champion+plain")
    assert context.collective("all_reduce", 2).family == "in_context"
    assert plain.collective("all_reduce", 2).family == "sigmoid"
    assert context.selection.digest != plain.selection.digest      # the error views tell the two apart
    frame = pd.DataFrame({"max_rank_bytes": [256.0]})
    scaled = context.collective("all_reduce", 2).model.predict(frame)[0]
    base = plain.collective("all_reduce", 2).model.predict(frame)[0]
    assert scaled > 2 * base

    from simulator.predict import predict_trace_set

    with_term = predict_trace_set(store, sets[0])
    without = predict_trace_set(store, sets[0], models="champion+plain")
    used, plain_used = {m.name for m in with_term.models}, {m.name for m in without.models}
    scaled = {context_model_name(platform, c, 2) for c in ("all_reduce", "all_to_all")}
    assert scaled <= used and not scaled & plain_used
    assert with_term.predicted_us > without.predicted_us


def test_cli_fits_and_predict_takes_the_switch(context_store):
    store, platform, sets = context_store
    home = store.workspace.home
    store.close()
    code, out, err = cli(home, "fit", "comms-context", "--collective", "all_reduce")
    assert code == 0, err
    assert "all_reduce" in out and "all_to_all" not in out and max(map(len, out.splitlines())) <= 80
    code, out, err = cli(home, "predict", "--trace-set", sets[1], "--collectives", "plain")
    assert code == 0, err
    with Store.open(store.workspace) as again:
        spec = again.scalar("SELECT selection_spec FROM predictions ORDER BY prediction_id DESC LIMIT 1")
    assert spec == "champion+plain"
    one_line_error(cli(home, "predict", "--trace-set", sets[1], "--collectives", "neither"), "--collectives")


def test_refused_without_traces(fit_workspace):
    one_line_error(cli(fit_workspace.home, "fit", "comms-context"), "no traced collectives")


def test_compute_inside_the_work_is_taken_out_only_when_the_core_is_shared():
    compute = Op("aten::mm", [Kernel(Stream.COMPUTE, 300.0)], start_us=150.0, cpu_dur_us=300.0)
    reduce = Op("c10d::allreduce_", [Kernel(Stream.COMM, 1000.0, "gloo:all_reduce", 0.0, "", 20.0)],
                collective="all_reduce", comm_bytes=1024.0, start_us=100.0, cpu_dur_us=40.0)
    graph = RankGraph(0, [reduce, compute])
    assert rank_work(graph, subtract_compute=False) == {0: (1000.0, 1000.0)}
    assert rank_work(graph, subtract_compute=True) == {0: (700.0, 1000.0)}   # work 120..1120 holds mm 150..450


def test_factor_slope_needs_sizes_spanning_octaves():
    sizes = 2.0 ** np.arange(10, 20)
    ratios = 2.0 ** (0.25 * (np.log2(sizes) - 15)) * 3.0
    factor = fit_factor(sizes, ratios)
    assert factor.b == pytest.approx(0.25 * np.log(2), rel=1e-3)
    assert factor(np.array([2.0 ** 15]))[0] == pytest.approx(3.0, rel=1e-3)
    assert factor(np.array([2.0 ** 40]))[0] == pytest.approx(factor(np.array([2.0 ** 19]))[0])  # clipped
    flat = fit_factor(np.array([1024.0, 2048.0]), np.array([2.0, 8.0]))
    assert flat.b == 0.0 and isinstance(flat, Factor)


def test_the_collectives_choice_keeps_one_version_per_collective():
    from fitters.load import ModelRef
    from simulator.model_set import choose_collectives, parse_spec, with_collectives

    refs = [ModelRef("relu", 1, "relu", "fwd", "mlp", "cold", "torch", None),
            ModelRef("ar", 1, "all_reduce", None, "sigmoid", None, None, 2),
            ModelRef("ar.ctx", 2, "all_reduce", None, "in_context", None, None, 2),
            ModelRef("a2a", 1, "all_to_all", None, "sigmoid", None, None, 2)]
    assert [r.name for r in choose_collectives(refs, "in-context")] == ["relu", "ar.ctx", "a2a"]
    assert [r.name for r in choose_collectives(refs, "plain")] == ["relu", "ar", "a2a"]
    assert with_collectives("champion", "plain") == "champion+plain"
    assert with_collectives("champion+plain", "in-context") == "champion+plain"   # the spec's own choice stays
    assert parse_spec("ar:1,relu:1+plain") == ("", {"ar": 1, "relu": 1})


def _comm_op(start: float, cpu: float, gap: float, dur: float) -> Op:
    return Op("c10d::alltoall_base_", [Kernel(Stream.COMM, dur, gap_before_us=gap, launch_us=0.0)],
              collective="all_to_all", start_us=start, cpu_dur_us=cpu)


def test_the_lag_is_the_spread_of_the_ranks_work_end_times():
    # both ranks there within 25 µs; rank 0's work ends at 1000 + 5 + 200, rank 1's at 1025 + 5 + 4451: a stall
    stalled = [_comm_op(1000.0, 10.0, 5.0, 200.0), _comm_op(1025.0, 10.0, 5.0, 4451.0)]
    assert end_lag(stalled) == pytest.approx((1025 + 5 + 4451) - (1000 + 5 + 200))
    # a late arrival the other rank waited for: both end together, no lag
    waited = [_comm_op(1000.0, 10.0, 0.0, 3000.0), _comm_op(3800.0, 10.0, 0.0, 200.0)]
    assert end_lag(waited) == 0.0
    assert end_lag([_comm_op(0.0, 1.0, 0.0, 5.0), Op("c10d::alltoall_base_", collective="all_to_all")]) == 0.0


def test_the_stall_is_the_training_rows_mean_lag_added_to_every_call(context_store):
    store, platform, sets = context_store
    rows = traced_collectives(store, platform, lambda world, threads: False)
    assert (rows["lag_us"] >= 0).all() and rows["lag_us"].notna().all()
    plain = load_model_set(store, platform, "champion+plain").collective("all_reduce", 2).model
    fitted = fit_group(rows[rows["collective"] == "all_reduce"], plain, "plain:1", seed=0)
    train = fitted.rows[fitted.rows["trace_set_id"].isin(fitted.train_sets)]
    assert fitted.model.stall_us == pytest.approx(train["lag_us"].mean())
    frame = pd.DataFrame({"max_rank_bytes": [256.0, 4096.0]})
    expected = plain.predict(frame) * fitted.model.factor(np.array([256.0, 4096.0])) + fitted.model.stall_us
    assert np.allclose(fitted.model.predict(frame), expected)
    config = fitted.model.config()
    assert config["stall_us"] == fitted.model.stall_us
    config.pop("stall_us")   # a version saved before the stall term loads without one
    assert type(fitted.model).from_saved(config, Path(".")).stall_us == 0.0


def test_the_rank_compute_is_kept_unless_asked_to_subtract(context_store):
    store, platform, _ = context_store
    shared = lambda world, threads: True   # noqa: E731  (the 2-core rule: no core for the comm threads)
    kept = traced_collectives(store, platform, shared)
    subtracted = traced_collectives(store, platform, shared, subtract_compute=True)
    assert not kept["compute_subtracted"].any() and subtracted["compute_subtracted"].all()
    assert (kept["traced_us"] == kept["raw_us"]).all()
    assert (subtracted["traced_us"] <= subtracted["raw_us"]).all()


def test_a_prediction_priced_by_a_term_trained_on_its_own_trace_set_is_in_sample(context_store):
    from simulator.error_stats import e2e_errors

    store, platform, sets = context_store
    home = store.workspace.home
    store.close()
    code, out, err = cli(home, "fit", "comms-context", "--trace-set", sets[0], "--trace-set", sets[1])
    assert code == 0, err
    for trace_set in sets:
        code, _, err = cli(home, "predict", "--trace-set", trace_set)
        assert code == 0, err
    with Store.open(store.workspace, read_only=True) as again:
        trained = set(again.query("SELECT t.trace_set_id FROM model_versions m, unnest(m.data_runs) u(r) "
                                  "JOIN trace_sets t ON t.run_id = u.r WHERE m.family = 'in_context'")
                      ["trace_set_id"])
        assert trained and trained < set(sets)           # one set trained, the other held out
        flags = again.query("SELECT trace_set_id, in_sample, self_priced FROM v_prediction_errors "
                            "WHERE mode = 'model'")
        assert dict(zip(flags["trace_set_id"], flags["in_sample"])) == {s: s in trained for s in sets}
        counted = e2e_errors(again, mode="model")["n"].sum()
        # the error tables count the held-out one only, and only where models priced most of its work (this store
        # has collective models but no kernel models: its compute keeps the traced times, replay rather than model)
        self_priced = dict(zip(flags["trace_set_id"], flags["self_priced"]))
        assert counted == sum(1 for s in sets if s not in trained and not self_priced[s])


def _as_workload_run(store: Store, trace_set: int, measured_us: float) -> str:
    """Give a stored trace set a workload run measured at ``measured_us`` (its own run id, like `collect workload`)."""
    run_id = store.scalar("SELECT run_id FROM trace_sets WHERE trace_set_id = ?", [trace_set])
    platform = store.scalar("SELECT platform FROM trace_sets WHERE trace_set_id = ?", [trace_set])
    workload = store.insert_one("workloads", {"family": "other", "name": f"gloo{trace_set}", "config": {},
                                              "config_hash": f"gloo{trace_set}", "batch_size": 1, "world_size": 2},
                                returning="workload_id")
    store.insert_one("workload_runs", {"run_id": run_id, "workload_id": workload, "platform": platform,
                                       "iterations": 5, "warmup": 1, "measured_us": measured_us})
    return run_id


def test_a_step_calibration_solves_one_factor_on_the_training_runs_steps(context_store):
    from simulator.predict import predict_trace_set
    from simulator.session import PredictionSession
    from simulator.step_calibration import calibrate, cases, simulate_at

    store, platform, sets = context_store
    for ts in sets:   # measured runs first (the cases need one), their times set below
        _as_workload_run(store, ts, 1.0)
    # both runs measured as their steps with every collective 3x its plain curve: a step the factor can reach
    # whatever share of the recorded step the collectives hold (3x the whole step cannot be reached where the
    # collectives are a small part of it, as a recording under load can make them)
    session = PredictionSession(store, platform, models="champion+plain")
    steps = cases(store, sets, session.detail)
    plain_refs = {key: ref for key, ref in session.models.collectives.items() if key[1] == 2}
    target = dict(zip(sets, simulate_at(session, plain_refs, 3.0, steps)))
    for ts in sets:
        run_id = store.scalar("SELECT run_id FROM trace_sets WHERE trace_set_id = ?", [ts])
        store.conn.execute("UPDATE workload_runs SET measured_us = ? WHERE run_id = ?", [float(target[ts]), run_id])
    results, notes = calibrate(store, store.workspace, platform, sets, seed=0)
    assert not notes and set(results["collective"]) == {"all_reduce", "all_to_all"}
    assert results["factor"].nunique() == 1 and results["factor"].iloc[0] > 1.5   # collectives priced k x plain
    assert (results["n_train"] == 1).all() and (results["n_test"] == 1).all()
    trained = store.query("SELECT DISTINCT unnest(data_runs) AS r FROM model_versions WHERE family = 'in_context'")
    train_set = int(store.scalar("SELECT trace_set_id FROM trace_sets WHERE run_id = ?", [trained.at[0, "r"]]))
    calibrated = predict_trace_set(store, train_set)
    assert calibrated.predicted_us == pytest.approx(target[train_set], rel=1e-3)   # solved on its step
    assert results["test_gmae"].iloc[0] < results["plain_gmae"].iloc[0]   # the held-out run: nearer than plain
    model = load_model_set(store, platform).collective("all_reduce", 2).model
    assert model.stall_us == 0.0 and model.factor.b == 0.0
    from report.build import build_report

    build_report(store, store.workspace.home / "report", platform)   # in-context champions: a note, not a curve
    page = (store.workspace.home / "report" / "index.html").read_text()
    assert "predictions price it with the in-context version all_reduce.ws2.in_context" in page
    one_line_error(cli(store.workspace.home, "fit", "comms-context", "--target", "step"), "--trace-set")
    one_line_error(cli(store.workspace.home, "fit", "comms-context", "--target", "steps"), "--target")
    one_line_error(cli(store.workspace.home, "fit", "comms-context", "--target", "step", "--trace-set", sets[0],
                       "--subtract-compute"), "belong to --target call")
