"""`pmdb predict --what-if` on a real recording: a one-rank MLP training step (batch 8, Linear 16→32→1, SGD; the
test recording helper's profiled passes), stored with a workload row. Batch scaling rewrites exactly the dims that
carry the batch, a doubled batch predicts longer (at most 2.2×), a world size of 2 gets DDP's gradient all_reduce,
and every derived configuration is a stored trace set naming its parent, its transformation and its workload."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch

from collectors.ops.peaks import measure_peaks, store_peaks
from collectors.ops.timer import TimerSettings
from fitters.overheads import fit_overheads
from fitters.registry import Registry, VersionRecord
from fitters.roofline import uncalibrated
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import TraceGraph
from sim_store import ingest
from collectors.traces.ingest import RankTraces
from simulator.embedding_stats import EmbeddingStats
from simulator.model_set import platform_peaks
from simulator.predict import predict_trace_set
from simulator.session import PredictionSession
from simulator.whatif import resize_world, scale_batch
from simulator.whatif_predict import WhatIf, derive, predict_derived, source_set

BATCH = 8


def _register_roofline(store: Store, platform: str, peaks: dict, pass_: str) -> None:
    """A roofline model of fully_connected (``pass_``), registered in MLflow and made champion."""
    name = f"pmdb.{platform}.fully_connected.{pass_}.cold"
    record = VersionRecord(name=name, platform=platform, op="fully_connected", family="roofline", pass_=pass_,
                           implementation="torch", dtype="float32", cache_state="cold",
                           metrics={"gmae": 0.2, "mape": 0.25, "std": 0.1})
    registry = Registry(store.workspace)
    registry.set_champion(store, name, registry.log_version(
        store, None, record, uncalibrated("fully_connected", pass_, "float32", peaks), [], {}))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory, mlp_trace_files, mlflow_template) -> tuple[Workspace, int, str]:
    """(workspace, trace set id, platform): the recorded MLP step with its workload row (batch 8, world 1, a
    measured run), this machine's peaks, overheads from the trace, and roofline GEMM models as champions (its empty
    MLflow store a copy of the run's template: its creation is tested in tests/faults)."""
    import shutil

    root = tmp_path_factory.mktemp("whatif")
    paths = mlp_trace_files
    workspace = Workspace(root / "ws")
    with Store.open(workspace, create=True) as store:
        platform = platforms.resolve(store, None)
        with store.run("workload", platform, {}) as run:
            wid = store.insert_one("workloads", {"family": "other", "name": "mlp", "config": {"layers": [16, 32, 1]},
                                                 "config_hash": "mlp-8", "batch_size": BATCH, "world_size": 1},
                                   returning="workload_id")
            store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                               "iterations": 3, "warmup": 2, "threads": 1, "measured_us": 900.0})
        ts = ingest(store, platform, [RankTraces(0, paths["kineto"], paths["et"])], "mlp", "captured",
                    workload_id=wid)
        rows = measure_peaks(torch.device("cpu"), gemm_n=256, stream_bytes=16 * 2 ** 20,
                             settings=TimerSettings(warmup=1, min_reps=3, max_reps=5, min_time_us=20_000.0))
        with store.run("peaks", platform, {}) as run:
            store_peaks(store, run.run_id, platform, rows)
        with store.run("overheads", platform, {}) as run:
            fit_overheads(store, run.run_id, platform)
        peaks = platform_peaks(store, platform)
        shutil.copy(mlflow_template.mlflow_db, workspace.mlflow_db)
        for pass_ in ("fwd", "bwd"):
            _register_roofline(store, platform, peaks, pass_)
    return workspace, ts, platform


def _graph(store: Store, ts: int) -> TraceGraph:
    return load_graphs(store, ts, pick="best", detail=True)[0]


def _shapes(graph: TraceGraph, name: str) -> list[list]:
    """Input shapes of every op called ``name`` at any depth, in order."""
    def walk(ops):
        for op in ops:
            if op.name == name:
                yield op.input_shapes
            yield from walk(op.sub)
    return list(walk(graph.ranks[0].ops))


def test_batch_scaling_rewrites_the_batch_dims_only(mlp):
    workspace, ts, _ = mlp
    with Store.open(workspace, read_only=True) as store:
        graph = _graph(store, ts)
    scaled, _, info = scale_batch(graph, BATCH, 2 * BATCH)
    assert info.values == {8: 16} and info.ambiguous == 0 and info.shapes > 20
    # forward: inputs [B, 16] and [B, 32]; the weights [32, 16], [1, 32] and biases stay
    assert _shapes(scaled, "aten::linear") == [[[16, 16], [32, 16], [32]], [[16, 32], [1, 32], [1]]]
    assert _shapes(graph, "aten::linear") == [[[8, 16], [32, 16], [32]], [[8, 32], [1, 32], [1]]]  # untouched
    # backward GEMMs: input gradients [B, out] @ [out, in]; weight gradients [out, B] @ [B, in] (batch reduced)
    assert sorted(map(str, _shapes(scaled, "aten::mm"))) == sorted(map(str, [
        [[16, 1], [1, 32]], [[1, 16], [16, 32]], [[32, 16], [16, 16]]]))
    assert _shapes(scaled, "aten::relu") == [[[16, 32]]] and _shapes(scaled, "aten::mse_loss")[0][:2] == [[16, 1]] * 2
    # gradients and the optimizer do not depend on the batch
    assert _shapes(scaled, "torch::autograd::AccumulateGrad") == _shapes(graph, "torch::autograd::AccumulateGrad")
    assert _shapes(scaled, "aten::add_") == _shapes(graph, "aten::add_")
    assert math.isnan(scaled.measured_us) and scaled.trace_set_id is None
    with pytest.raises(PmdbError, match="multiple of the world size 2"):
        scale_batch(graph, BATCH, 9, world=2)


def test_world_size_inserts_and_drops_the_gradient_all_reduce(mlp):
    workspace, ts, _ = mlp
    with Store.open(workspace, read_only=True) as store:
        graph = _graph(store, ts)
    two, info = resize_world(graph, 2)
    params = 16 * 32 + 32 + 32 + 1
    assert (info.old, info.new, info.inserted, info.gradient_bytes) == (1, 2, 1, 4.0 * params)
    assert [r.rank for r in two.ranks] == [0, 1]
    for rank in two.ranks:
        coll = rank.collectives()
        assert [rank.ops[i].collective for i in coll] == ["all_reduce"] and rank.ops[coll[0]].comm_bytes == 4 * params
        last_grad = max(i for i, op in enumerate(rank.ops) if "AccumulateGrad" in op.name)
        assert coll[0] == last_grad + 1                      # launched once its bucket's last gradient is ready
        step = rank.ops[coll[0] + 1]
        assert step.phase == "optimizer" and step.waits_on == (coll[0],)   # DDP's finalisation
    one, back = resize_world(two, 1)
    assert back.dropped == 1 and not one.ranks[0].collectives() and len(one.ranks) == 1
    assert len(one.ranks[0].ops) == len(graph.ranks[0].ops)


def test_doubled_batch_is_stored_as_a_derived_trace_set_and_predicts_longer(mlp):
    workspace, ts, platform = mlp
    with Store.open(workspace) as store:
        session = PredictionSession(store, platform)
        source = source_set(store, ts)
        graph = _graph(store, ts)
        base = session.prediction(graph, EmbeddingStats(), source_platform=platform).predicted_us
        derived = derive(store, source, WhatIf(batch_size=2 * BATCH), detail=True, graph=graph)
        with store.run("predict", platform, {"what_if": True}) as run:
            result = predict_derived(store, run.run_id, derived, session)
        assert base < result.prediction.predicted_us <= 2.2 * base
        row = store.query("SELECT * FROM v_trace_sets WHERE trace_set_id = ?", [result.trace_set_id]).iloc[0]
        assert row["source"] == "derived" and row["parent_trace_set_id"] == ts and row["world_size"] == 1
        assert row["workload_id"] == source.workload_id and "batch 8->16" in row["label"]
        assert json.loads(row["derivation"])["batch_size"] == [8, 16]
        pred = store.query("SELECT * FROM v_predictions WHERE prediction_id = ?", [result.prediction_id]).iloc[0]
        assert pred["trace_set_id"] == result.trace_set_id and pred["predicted_us"] == result.prediction.predicted_us
        assert pd.isna(pred["measured_us"])   # batch 16 was never run
        # no gradient collective model at world size 2 here: the what-if says what to measure
        with pytest.raises(PmdbError, match="no all_reduce model at world size 2.*collect comms"):
            predict_derived(store, run.run_id, derive(store, source, WhatIf(world_size=2), detail=True, graph=graph),
                            session)
        with pytest.raises(PmdbError, match="trace set .* was derived"):
            predict_trace_set(store, result.trace_set_id)


def test_cli_what_if_prints_and_stores(mlp, capsys):
    workspace, ts, platform = mlp
    home = ["--home", str(workspace.home)]
    assert main([*home, "predict", "--what-if", "--trace-set", str(ts), "--batch-size", "32",
                 "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 1 and (rows[0]["batch"], rows[0]["world"]) == (32, 1) and rows[0]["x_recorded"] >= 1
    with Store.open(workspace, read_only=True) as store:
        assert store.scalar("SELECT parent_trace_set_id FROM v_trace_sets WHERE trace_set_id = ?",
                            [rows[0]["trace_set"]]) == ts
        # 4x the batch costs more; unrounded (x_recorded has 3 decimals, and this step's few tiny GEMMs add little
        # beside its per-op overheads: 1.000 on the 48 MiB-L3 Intel guest)
        predicted = store.scalar("SELECT predicted_us FROM predictions WHERE prediction_id = ?",
                                 [rows[0]["prediction_id"]])
        recorded = store.scalar("SELECT CAST(summary->>'$.recorded_us' AS DOUBLE) FROM collection_runs "
                                "WHERE kind = 'predict' ORDER BY started_at DESC LIMIT 1")
        assert predicted > recorded > 0
    assert main([*home, "predict", "--what-if", "--trace-set", str(ts), "--batch-size", "16"]) == 0
    out = capsys.readouterr().out
    assert f"derived from trace set {ts} (mlp: batch 8, world 1" in out and "x_recorded" in out
    assert max(map(len, out.splitlines())) <= 80


@pytest.mark.parametrize("args, message", [
    (["--trace-set", "{ts}", "--batch-size", "16"], "go with --what-if"),
    (["--what-if", "--all", "--batch-size", "16"], "not --all"),
    (["--what-if", "--trace-set", "{ts}"], "needs a change"),
    (["--what-if", "--trace-set", "{ts}", "--batch-size", "16", "--mode", "replay"], "no trace times to replay"),
    (["--what-if", "--trace-set", "{ts}", "--sharder", "naive"], "needs a DLRM trace set"),
    (["--what-if", "--trace-set", "{ts}", "--batch-size", "0"], "at least 1"),
    (["--trace-set", "{ts}", "--measure-shapes"], "go with --what-if"),
])
def test_what_if_mistakes_are_one_line(mlp, capsys, args, message):
    workspace, ts, _ = mlp
    code = main(["--home", str(workspace.home), "predict", *[a.format(ts=ts) for a in args]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("pmdb: error:") and message in err[0]


@pytest.mark.slow
def test_world_size_two_with_a_measured_all_reduce_model(mlp, capsys):
    """A real gloo all_reduce sweep at world size 2 and its fitted model price the inserted gradient bucket."""
    workspace, ts, platform = mlp
    home = ["--home", str(workspace.home)]
    assert main([*home, "collect", "comms", "--ops", "all_reduce", "--max-bytes", "16KiB", "--iters", "3",
                 "--warmup", "1", "--no-progress"]) == 0
    assert main([*home, "fit", "--op", "all_reduce", "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*home, "predict", "--what-if", "--trace-set", str(ts), "--world-size", "2", "--format",
                 "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["batch"], row["world"]) == (16, 2)     # each rank keeps its 8 samples
    with Store.open(workspace, read_only=True) as store:
        derived = store.query("SELECT * FROM v_trace_sets WHERE trace_set_id = ?", [row["trace_set"]]).iloc[0]
        assert derived["world_size"] == 2 and json.loads(derived["derivation"])["world_size"] == [1, 2]
        pred = store.query("SELECT per_rank FROM v_predictions WHERE prediction_id = ?", [row["prediction_id"]])
        ranks = json.loads(pred["per_rank"].iloc[0])
        assert len(ranks) == 2 and all(r["comm_kernel_us"] > 0 for r in ranks)
        used = store.query("SELECT name FROM prediction_models WHERE prediction_id = ?", [row["prediction_id"]])
        assert used["name"].str.contains("all_reduce").any()


@pytest.mark.slow
def test_measure_shapes_microbenchmarks_the_derived_shapes_and_refits(mlp, tmp_path, capsys):
    """--measure-shapes: the batch-32 graph's GEMM shapes are measured here (never the run itself), the touched ops
    refitted, and the prediction made with the new versions; asked again, nothing is new and nothing is refitted."""
    import shutil

    workspace, ts, _ = mlp
    home = ["--home", str(shutil.copytree(workspace.home, tmp_path / "ws"))]
    # a few sweep configs of fully_connected, so that it can be refitted; the other ops stay too small to fit
    assert main([*home, "collect", "ops", "--op", "fully_connected", "--sweep", "quick", "--max-configs", "10",
                 "--no-peaks", "--no-progress"]) == 0
    capsys.readouterr()
    ask = [*home, "predict", "--what-if", "--trace-set", str(ts), "--batch-size", "32", "--measure-shapes",
           "--format", "json"]
    assert main(ask) == 0
    captured = capsys.readouterr()
    row, err = json.loads(captured.out)[0], " ".join(captured.err.split())
    assert "new op shape(s) of the derived configuration(s)" in err
    assert "refitted fully_connected (" in err and "relu not refitted: too few" in err   # relu: one row
    with Store.open(Workspace(tmp_path / "ws"), read_only=True) as store:
        run = store.query("SELECT run_id, args FROM collection_runs WHERE kind = 'ops' "
                          "AND args->>'$.from_what_if' IS NOT NULL").iloc[0]
        assert json.loads(run["args"])["from_what_if"] == [ts]
        fc = [json.loads(p) for p in store.query(
            "SELECT params FROM op_measurements WHERE run_id = ? AND op = 'fully_connected' AND pass = 'fwd'",
            [run["run_id"]])["params"]]
        assert {"B": 1, "M": 32, "N": 32, "K": 16} in fc          # Linear 16 -> 32 at the derived batch
        # priced with the new measurements (exact shapes, --kernels measured: the default)
        pred = store.query("SELECT measured_ops, measurements_upto FROM predictions WHERE prediction_id = ?",
                           [row["prediction_id"]]).iloc[0]
        newest = store.scalar("SELECT max(measurement_id) FROM op_measurements WHERE run_id = ?", [run["run_id"]])
        assert pred["measured_ops"] > 0 and pred["measurements_upto"] >= newest
        fitted = store.query("SELECT name, version FROM model_versions WHERE run_id IN (SELECT run_id FROM "
                             "collection_runs WHERE kind = 'fit')")
    # by the models alone, the refitted versions price it
    assert main([*ask[:-3], "--kernels", "models", "--format", "json"]) == 0
    by_models = json.loads(capsys.readouterr().out)[0]
    with Store.open(Workspace(tmp_path / "ws"), read_only=True) as store:
        used = store.query("SELECT name, version FROM prediction_models WHERE prediction_id = ?",
                           [by_models["prediction_id"]])
        assert set(zip(used["name"], used["version"])) & set(zip(fitted["name"], fitted["version"]))
    assert main(ask) == 0
    err = capsys.readouterr().err
    assert "measured 0 new op shape(s)" in err and "refitted" not in err


def test_an_imported_trace_needs_its_recorded_batch(mlp, mlp_trace_files, capsys):
    workspace, _, platform = mlp
    with Store.open(workspace) as store:
        imported = ingest(store, platform, [RankTraces(0, mlp_trace_files["kineto"], mlp_trace_files["et"])],
                          "someone's mlp", "imported")
    home = ["--home", str(workspace.home), "predict", "--what-if", "--trace-set", str(imported)]
    assert main([*home, "--batch-size", "16"]) == 2
    assert "give it with --recorded-batch N" in capsys.readouterr().err
    assert main([*home, "--batch-size", "16", "--recorded-batch", "8", "--format", "json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    with Store.open(workspace, read_only=True) as store:
        derived = store.query("SELECT workload_id, derivation FROM v_trace_sets WHERE trace_set_id = ?",
                              [row["trace_set"]]).iloc[0]
    assert row["batch"] == 16 and json.loads(derived["derivation"])["batch_size"] == [8, 16]
    assert pd.isna(derived["workload_id"])   # an imported trace without a workload row


def test_a_lookup_count_that_is_not_a_batch_multiple_is_scaled_and_rounded():
    """A DLRM recording's lookups (dlrm_ddp at batch 192: 15 275 indices over 8 tables, pooling about 10) halved to
    batch 96: the indices count is an expectation, so it becomes round(15 275 / 2); the offsets (8 x 192 + 1) stay
    exact; the weights never change."""
    from pmdb.platform import Semantics
    from pmdb.traces.graph import Op, RankGraph
    schema = ("fbgemm::bounds_check_indices(Tensor rows_per_table, Tensor(a!) indices, Tensor(b!) offsets, "
              "int bounds_check_mode, Tensor(c!) warning) -> ()")
    op = Op("fbgemm::bounds_check_indices", input_shapes=[[8], [15275], [1537], [], [1]],
            attrs={"op_schema": schema})
    graph = TraceGraph([RankGraph(0, [op])], Semantics.SYNC_HOST)
    half, _, scaling = scale_batch(graph, 192, 96)
    assert half.ranks[0].ops[0].input_shapes[:3] == [[8], [7638], [769]]
    double, _, _ = scale_batch(graph, 192, 384)
    assert double.ranks[0].ops[0].input_shapes[:3] == [[8], [30550], [3073]]
    assert op.input_shapes[1] == [15275]                      # the recorded graph is untouched
