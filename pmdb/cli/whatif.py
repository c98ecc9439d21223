"""``pmdb predict --what-if``: predict a configuration that was not run (another batch size, world size or DLRM
sharding plan, on this or another platform) from one recorded trace set, print it beside the recorded
configuration's prediction and store it (a derived trace set naming its parent, and its prediction)."""
from __future__ import annotations

import sys
import textwrap
from dataclasses import replace
from typing import TYPE_CHECKING, Optional

import pandas as pd
import typer

from pmdb.cli.common import open_store, render, workspace
from pmdb.errors import PmdbError

if TYPE_CHECKING:
    from simulator.request import PredictionRequest


def _ms(us: Optional[float]) -> Optional[float]:
    return None if us is None or pd.isna(us) else round(us / 1000, 3)


def what_if(ctx: typer.Context, request: PredictionRequest, *, batch_size: Optional[int],
            world_size: Optional[int], sharders: list[str], recorded_batch: Optional[int], fmt: str,
            measure_shapes: bool = False, parallel: Optional[dict] = None) -> None:
    """Derive, predict and store each asked configuration (one per ``--sharder``, else one)."""
    if parallel:
        from pmdb.cli.whatif_parallel import parallel_what_if

        return parallel_what_if(ctx, request, batch_size=batch_size, world_size=world_size, sharders=sharders,
                                recorded_batch=recorded_batch, fmt=fmt, measure_shapes=measure_shapes,
                                parallel=parallel)
    from simulator.whatif_predict import WhatIf, WhatIfSetup, derive, predict_derived, request_source
    from simulator.whatif_shapes import check_local, measure_shapes as measure

    if (request.trace_set_id is None) == (request.workload_run_id is None):
        raise PmdbError("--what-if derives from one recorded trace set: give --trace-set ID (or a workload RUN_ID)")
    if request.mode != "model":
        raise PmdbError("--what-if predicts with fitted models (--mode model): a configuration that was not run "
                        "has no trace times to replay")
    for name, value in (("--batch-size", batch_size), ("--world-size", world_size),
                        ("--recorded-batch", recorded_batch)):
        if value is not None and value < 1:
            raise PmdbError(f"{name} must be at least 1 (got {value})")
    if len(set(sharders)) != len(sharders):
        raise PmdbError("--sharder names a sharder twice")
    spec = WhatIf(batch_size, world_size, recorded_batch)
    with open_store(ctx) as store:
        source = request_source(store, request)
        hooks = [(None, None)]
        if sharders:
            from shard.reshard import reshard_hook

            hooks = [(name, reshard_hook(source, name)) for name in sharders]
        target = request.target_platform or source.platform
        session = request.session(store, target)
        if measure_shapes:
            check_local(store, session.platform.name)
        setup = WhatIfSetup.load(store, source, session)
        derived = [derive(store, source, spec, detail=session.detail, reshard=hook, sharder=name, graph=setup.graph,
                          embedding=setup.fresh_embedding()) for name, hook in hooks]
        if measure_shapes:
            done = measure(store, workspace(ctx), derived, session.platform.name, threads=source.threads,
                           progress=sys.stderr.isatty())
            print(textwrap.fill(
                f"pmdb: measured {done.measured} new op shape(s) of the derived configuration(s) "
                f"({done.already} already stored; ops run {done.ops_run})"
                + (f"; refitted {', '.join(done.refitted)} ({done.fit_versions} versions)" if done.refitted
                   else ""), 80, subsequent_indent="  "), file=sys.stderr)
            for note in done.notes:
                print(textwrap.fill(f"pmdb: note: {note}", 80, subsequent_indent="  "), file=sys.stderr)
            setup = replace(setup, session=request.session(store, target))   # the refitted versions
        session = setup.session
        recorded = setup.recorded_us()
        options = {"what_if": True, "trace_set": source.trace_set_id, "batch_size": batch_size,
                   "world_size": world_size, "sharders": sharders, "models": request.models,
                   "target_platform": session.platform.name, "cache_state": request.cache_state,
                   "overhead_version": request.overhead_version, "overheads_from": request.overheads_from,
                   "measure_shapes": measure_shapes}
        with store.run("predict", session.platform.name, options) as run:
            results = [predict_derived(store, run.run_id, d, session) for d in derived]
            run.summary = {"predictions": [r.prediction_id for r in results],
                           "derived_trace_sets": [r.trace_set_id for r in results], "recorded_us": recorded}
    for note in dict.fromkeys(n for r in results for n in r.derived.notes + r.prediction.defaults):
        print(textwrap.fill(f"pmdb: note: {note}", 80, subsequent_indent="  "), file=sys.stderr)
    ranged = any(r.prediction.spec_range is not None for r in results)
    rows = [{"prediction_id": r.prediction_id, "trace_set": r.trace_set_id, "batch": r.derived.batch_size,
             "world": r.derived.world_size, "plan": r.derived.derivation.get("sharder", r.derived.sharder),
             "predicted_ms": _ms(r.prediction.predicted_us),
             "x_recorded": round(r.prediction.predicted_us / recorded, 3) if recorded > 0 else None,
             "measured_ms": _ms(r.prediction.measured_us),
             "error_pct": None if r.prediction.rel_error is None else round(100 * r.prediction.rel_error, 2),
             **({"range_ms": r.prediction.range_ms} if ranged else {})}
            for r in results]
    if fmt == "table":
        batch = "" if source.batch_size is None else f"batch {source.batch_size}, "
        typer.echo(f"derived from trace set {source.trace_set_id} ({source.label}: {batch}world "
                   f"{source.world_size}, recorded on {source.platform})")
        typer.echo(f"the recorded configuration predicts {recorded / 1000:.3f} ms on {session.platform.name}")
    render(pd.DataFrame(rows), fmt, labels={"prediction_id": "id", "trace_set": "set"}, keep=("plan",))
