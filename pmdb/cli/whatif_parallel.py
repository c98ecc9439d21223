"""``pmdb predict --what-if --data-parallel D --tensor-parallel T --pipeline-parallel P [--micro-batches M]``: one
GPU's graph predicted as a Megatron-style parallel step; prints the step, its stages and which collective models
priced it (logic in :mod:`simulator.whatif_parallel_run`)."""
from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING, Optional

import pandas as pd
import typer

from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError

if TYPE_CHECKING:
    from simulator.request import PredictionRequest


def parallel_what_if(ctx: typer.Context, request: PredictionRequest, *, batch_size: Optional[int],
                     world_size: Optional[int], sharders: list[str], recorded_batch: Optional[int], fmt: str,
                     measure_shapes: bool, parallel: dict) -> None:
    """Derive, predict and store one parallel configuration."""
    from pmdb.traces.from_store import load_graphs
    from simulator.whatif_parallel import ParallelSpec
    from simulator.whatif_parallel_run import predict_parallel
    from simulator.whatif_predict import request_source

    if (request.trace_set_id is None) == (request.workload_run_id is None):
        raise PmdbError("--what-if derives from one recorded trace set: give --trace-set ID (or a workload RUN_ID)")
    if world_size is not None or sharders or measure_shapes:
        raise PmdbError("--world-size, --sharder and --measure-shapes do not combine with --data-parallel, "
                        "--tensor-parallel and --pipeline-parallel (use --data-parallel for the ranks)")
    if request.mode != "model":
        raise PmdbError("--what-if predicts with fitted models (--mode model)")
    for name, value in (("--batch-size", batch_size), ("--recorded-batch", recorded_batch),
                        ("--gpus", parallel.get("gpus"))):
        if value is not None and value < 1:
            raise PmdbError(f"{name} must be at least 1 (got {value})")
    spec = ParallelSpec(parallel.get("dp", 1), parallel.get("tp", 1), parallel.get("pp", 1),
                        parallel.get("micro_batches", 1), parallel.get("gpus"), bool(parallel.get("fused")))
    with open_store(ctx) as store:
        source = request_source(store, request)
        session = request.session(store, request.target_platform or source.platform)
        if sys.stderr.isatty():
            print(f"pmdb: loading trace set {source.trace_set_id} ...", file=sys.stderr, flush=True)
        graph = load_graphs(store, source.trace_set_id, pick="best", detail=session.detail)[0]
        options = {"what_if": True, "trace_set": source.trace_set_id, "batch_size": batch_size,
                   "parallel": parallel, "models": request.models, "target_platform": session.platform.name,
                   "overheads_from": request.overheads_from}
        with store.run("predict", session.platform.name, options) as run:
            res = predict_parallel(store, run.run_id, source, graph, spec, batch_size, session,
                                   threads=source.threads, recorded_batch=recorded_batch)
            run.summary = {"predictions": [res.prediction_id], "derived_trace_sets": [res.trace_set_id]}
    for note in dict.fromkeys(res.notes + res.prediction.defaults):
        print(textwrap.fill(f"pmdb: note: {note}", 80, subsequent_indent="  "), file=sys.stderr)
    rows = [{"prediction_id": res.prediction_id, "trace_set": res.trace_set_id, "split": spec.tag(),
             "gpus": spec.world, "batch": res.batch, "micro": res.micro_batch,
             "predicted_ms": round(res.schedule.step_us / 1e3, 3),
             "bubble_pct": round(100 * res.schedule.bubble_share, 1)}]
    if fmt != "table":
        rows[0]["collectives"] = "; ".join(f"{what}: {by}" for what, by in sorted(res.priced_by.items()))
    if fmt == "table":
        typer.echo(textwrap.fill(f"derived from trace set {source.trace_set_id} ({source.label}: batch "
                                 f"{source.batch_size}, recorded on {source.platform}), predicted on "
                                 f"{session.platform.name}", 80))
        for s, (f, b) in enumerate(zip(res.fw_us, res.bw_last_us)):
            if spec.pp > 1:
                typer.echo(f"  stage {s}: forward {f / 1e3:.3f} ms, backward {b / 1e3:.3f} ms per micro-batch")
        if spec.pp > 1:
            typer.echo(f"  stage to stage {res.send_us / 1e3:.3f} ms each way; tied embedding all-reduce "
                       f"{res.embedding_us / 1e3:.3f} ms")
        typer.echo("collectives priced by:" + ("" if res.priced_by else " none (one GPU)"))
        for what, by in sorted(res.priced_by.items()):
            typer.echo(textwrap.fill(f"{what}: {by}", 80, initial_indent="  ", subsequent_indent="    "))
    render(pd.DataFrame(rows), fmt, labels={"prediction_id": "id", "trace_set": "set"})
