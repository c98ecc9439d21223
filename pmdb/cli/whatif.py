"""``pmdb predict --what-if``: predict a configuration that was not run (another batch size, world size or DLRM
sharding plan, on this or another platform) from one recorded trace set, print it beside the recorded
configuration's prediction and store it (a derived trace set naming its parent, and its prediction)."""
from __future__ import annotations

import sys
import textwrap
from typing import Optional

import pandas as pd
import typer

from pmdb.cli.common import open_store, render, workspace
from pmdb.errors import PmdbError


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None or pd.isna(us) else round(us / 1000, 3)


def what_if(ctx: typer.Context, *, trace_set: Optional[int], run_id: Optional[str], batch_size: Optional[int],
            world_size: Optional[int], sharders: list[str], recorded_batch: Optional[int], mode: str, models: str,
            target_platform: Optional[str], cache_state: Optional[str], overhead_version: Optional[int],
            overheads_from: Optional[str], fmt: str, measure_shapes: bool = False,
            kernels: str = "measured", parallel: Optional[dict] = None) -> None:
    """Derive, predict and store each asked configuration (one per ``--sharder``, else one)."""
    if parallel:
        from pmdb.cli.whatif_parallel import parallel_what_if

        return parallel_what_if(ctx, trace_set=trace_set, run_id=run_id, batch_size=batch_size,
                                world_size=world_size, sharders=sharders, recorded_batch=recorded_batch, mode=mode,
                                models=models, target_platform=target_platform, cache_state=cache_state,
                                overhead_version=overhead_version, overheads_from=overheads_from, fmt=fmt,
                                measure_shapes=measure_shapes, kernels=kernels, parallel=parallel)
    from simulator.model_set import check_cache_state
    from simulator.session import PredictionSession
    from simulator.store_rows import trace_set_for_run
    from simulator.whatif_predict import WhatIf, derive, predict_derived, source_set, source_threads
    from simulator.whatif_shapes import check_local, measure_shapes as measure
    from pmdb.traces.from_store import load_graphs
    from simulator.embedding_stats import EmbeddingStats

    if (trace_set is None) == (run_id is None):
        raise PmdbError("--what-if derives from one recorded trace set: give --trace-set ID (or a workload RUN_ID)")
    if mode != "model":
        raise PmdbError("--what-if predicts with fitted models (--mode model): a configuration that was not run "
                        "has no trace times to replay")
    for name, value in (("--batch-size", batch_size), ("--world-size", world_size),
                        ("--recorded-batch", recorded_batch)):
        if value is not None and value < 1:
            raise PmdbError(f"{name} must be at least 1 (got {value})")
    if len(set(sharders)) != len(sharders):
        raise PmdbError("--sharder names a sharder twice")
    check_cache_state(cache_state)
    spec = WhatIf(batch_size, world_size, recorded_batch)
    with open_store(ctx) as store:
        source_id = trace_set if trace_set is not None else trace_set_for_run(store, run_id)
        source = source_set(store, int(source_id))
        hooks = [(None, None)]
        if sharders:
            from shard.reshard import reshard_hook

            hooks = [(name, reshard_hook(source, name)) for name in sharders]
        def new_session() -> PredictionSession:
            return PredictionSession(store, target_platform or source.platform, models=models,
                                     cache_state=cache_state, overhead_version=overhead_version,
                                     overheads_from=overheads_from, kernels=kernels)

        session = new_session()
        if measure_shapes:
            check_local(store, session.platform.name)
        graph = load_graphs(store, source.trace_set_id, pick="best", detail=session.detail,
                            reuse=session.reuse)[0]
        derived = [derive(store, source, spec, detail=session.detail, reshard=hook, sharder=name, graph=graph)
                   for name, hook in hooks]
        threads = source_threads(store, source)
        if measure_shapes:
            done = measure(store, workspace(ctx), derived, session.platform.name, threads=threads,
                           progress=sys.stderr.isatty())
            print(textwrap.fill(
                f"pmdb: measured {done.measured} new op shape(s) of the derived configuration(s) "
                f"({done.already} already stored; ops run {done.ops_run})"
                + (f"; refitted {', '.join(done.refitted)} ({done.fit_versions} versions)" if done.refitted
                   else ""), 80, subsequent_indent="  "), file=sys.stderr)
            for note in done.notes:
                print(textwrap.fill(f"pmdb: note: {note}", 80, subsequent_indent="  "), file=sys.stderr)
            session = new_session()   # the refitted versions
        recorded = session.prediction(graph, EmbeddingStats.from_store(store, source.workload_id),
                                      source_platform=source.platform,
                                      threads=threads).predicted_us
        options = {"what_if": True, "trace_set": source.trace_set_id, "batch_size": batch_size,
                   "world_size": world_size, "sharders": sharders, "models": models,
                   "target_platform": session.platform.name, "cache_state": cache_state,
                   "overhead_version": overhead_version, "overheads_from": overheads_from,
                   "measure_shapes": measure_shapes}
        with store.run("predict", session.platform.name, options) as run:
            results = [predict_derived(store, run.run_id, d, session) for d in derived]
            run.summary = {"predictions": [r.prediction_id for r in results],
                           "derived_trace_sets": [r.trace_set_id for r in results], "recorded_us": recorded}
    for note in dict.fromkeys(n for r in results for n in r.derived.notes + r.prediction.defaults):
        print(textwrap.fill(f"pmdb: note: {note}", 80, subsequent_indent="  "), file=sys.stderr)
    rows = [{"prediction_id": r.prediction_id, "trace_set": r.trace_set_id, "batch": r.derived.batch_size,
             "world": r.derived.world_size, "plan": r.derived.derivation.get("sharder", r.derived.sharder),
             "predicted_ms": _ms(r.prediction.predicted_us),
             "x_recorded": round(r.prediction.predicted_us / recorded, 3) if recorded > 0 else None,
             "measured_ms": _ms(r.prediction.measured_us),
             "error_pct": None if r.prediction.rel_error is None else round(100 * r.prediction.rel_error, 2)}
            for r in results]
    if fmt == "table":
        batch = "" if source.batch_size is None else f"batch {source.batch_size}, "
        typer.echo(f"derived from trace set {source.trace_set_id} ({source.label}: {batch}world "
                   f"{source.world_size}, recorded on {source.platform})")
        typer.echo(f"the recorded configuration predicts {recorded / 1000:.3f} ms on {session.platform.name}")
    render(pd.DataFrame(rows), fmt, labels={"prediction_id": "id", "trace_set": "set"}, keep=("plan",))
