"""``pmdb collect ops`` (kernel microbenchmark sweeps) and ``pmdb collect peaks`` (roofline peaks)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import pandas as pd
import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.recorded import recorded_threads

_PLATFORM_HELP = ("Name of this machine's platform (default: the detected one, registered on first use); an "
                  "unknown name is refused unless --create-platform.")
_NEW_HELP = "Register this machine under the --platform name when no platform has it yet."


def _configs(texts: list[str]) -> list[dict] | None:
    configs = []
    for text in texts:
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PmdbError(f"bad --config {text!r}: not JSON ({exc.msg})") from None
        if not isinstance(value, dict):
            raise PmdbError(f"bad --config {text!r}: give a JSON object like '{{\"M\": 64, \"N\": 64, \"K\": 64}}'")
        configs.append(value)
    return configs or None


def ops(ctx: typer.Context,
        op: List[str] = typer.Option([], "--op", help="Op to measure (repeatable; default: all). See --list."),
        pass_: str = typer.Option("both", "--pass", help="fwd, bwd or both (bwd includes the fused optimizer "
                                                         "for embedding lookups)."),
        sweep: str = typer.Option("default", "--sweep", help="default (320 configs per ML-modelled op, about 32 per "
                                  "roofline op; per embedding implementation 320 plus 40 with tables above the "
                                  "cache, up to 1 GiB, and 16 with 8-20 heavy tables), large (big sizes), random "
                                  "(seeded sample, see --sample) or quick (12 configs per op, for a fast first "
                                  "look, e.g. a quickstart)."),
        sample: Optional[int] = typer.Option(None, "--sample", help="Configs per op for --sweep random "
                                                                    "(default 100)."),
        seed: int = typer.Option(0, "--seed", help="Seed of the random sweep, of tensor values and of index "
                                                   "batches."),
        budget_minutes: Optional[float] = typer.Option(None, "--budget-minutes",
                                                       help="Stop cleanly after this many minutes (the run "
                                                            "completes; its summary says stopped: budget). On a "
                                                            "GPU the ops take turns, so each gets its first "
                                                            "configs."),
        force: bool = typer.Option(False, "--force", help="Measure configs again even if this platform has them."),
        platform: Optional[str] = typer.Option(None, "--platform", help=_PLATFORM_HELP),
        new_platform: bool = typer.Option(False, "--create-platform", help=_NEW_HELP),
        kernels: bool = typer.Option(False, "--kernels", help="Also record the per-kernel breakdown from the "
                                                              "profiler (names and µs per call)."),
        memory_cap: Optional[str] = typer.Option(None, "--memory-cap", help="Skip configs estimated to need more "
                                                 "memory than this (e.g. 2GiB; default: a quarter of RAM, at most "
                                                 "8 GiB)."),
        cache: str = typer.Option("both", "--cache", help="CPU cache state: warm (back-to-back repetitions), "
                                  "cold (LLC flushed before each repetition) or both; with --from-traces, both "
                                  "also times the traced embedding lookups in a training loop of their own "
                                  "('loop': a fresh batch each time, forward then backward). CUDA uses device "
                                  "events."),
        max_configs: Optional[int] = typer.Option(None, "--max-configs", help="At most this many configs per op "
                                                  "(a seeded subset of the sweep)."),
        threads: Optional[int] = typer.Option(None, "--threads", help="torch intra-op threads, recorded with every "
                                              "row; with --from-trace-set, default: the threads the set was "
                                              "recorded with, when known. "
                                    "Default 1: what each rank of a multi-rank CPU run uses, and steady timings on "
                                    "a shared machine; match a single-process workload's setting with --threads N."),
        config: List[str] = typer.Option([], "--config", help="Measure this config of the single --op (JSON, "
                                         "repeatable), e.g. '{\"M\":64,\"N\":64,\"K\":64}'."),
        index_source: List[str] = typer.Option([], "--index-source", help="Embedding index source (repeatable): "
                                               "uniform, zipf:1.05, locality:<locality_stats.txt>[:<entry>], "
                                               "dataset:<file>. Default: uniform, zipf:1.05, zipf:1.2 and the "
                                               "shared DLRM locality statistics."),
        dataset: Optional[Path] = typer.Option(None, "--dataset", help="A DLRM open-source data file "
                                               "(.pt.gz with indices, offsets, lengths) to draw embedding batches "
                                               "from."),
        optimizer: str = typer.Option("exact_sgd", "--optimizer", help="Optimizer fused into the embedding "
                                      "backward: exact_sgd, exact_adagrad, exact_row_wise_adagrad (FBGEMM only)."),
        lr: float = typer.Option(0.01, "--lr", help="Learning rate of that optimizer."),
        peaks: bool = typer.Option(True, "--peaks/--no-peaks", help="Measure the platform's roofline peaks first."),
        from_traces: bool = typer.Option(False, "--from-traces", help="Instead of a sweep, measure exactly the "
                                         "op shapes of stored workload traces (default: every captured trace set "
                                         "of the platform; only shapes are used, never the traced times). "
                                         "Embedding tables come from the workload's stored statistics."),
        from_run: Optional[str] = typer.Option(None, "--from-run", help="Only the trace sets this run stored "
                                               "(its id or first 6+ characters; implies --from-traces)."),
        from_trace_set: Optional[int] = typer.Option(None, "--from-trace-set", help="Only this trace set, of any "
                                                     "platform or source (implies --from-traces)."),
        list_: bool = typer.Option(False, "--list", help="List the ops and their sweep sizes, then exit."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar with ETA."),
        ) -> None:
    """Microbenchmark kernels (forward and backward) on this machine into the store; resumable by config_key."""
    from collectors.ops.run import TraceSelection, list_ops, run_ops  # torch: loaded only when ops are measured
    from collectors.ops.sweep import SweepOptions, default_memory_cap, parse_bytes

    if list_:
        render(list_ops())
        return
    if sample is not None and sweep != "random":
        raise PmdbError("--sample applies to --sweep random")
    from_traces = from_traces or from_run is not None or from_trace_set is not None
    if from_traces and sweep != "default":
        raise PmdbError("--sweep does not apply to --from-traces (the traces give the configs)")
    sources = list(index_source) + ([f"dataset:{dataset}"] if dataset else [])
    options = SweepOptions(
        ops=list(op) or None, passes=pass_, sweep=sweep, sample=sample or 100, seed=seed,
        budget_s=None if budget_minutes is None else budget_minutes * 60.0, force=force, kernels=kernels,
        memory_cap=parse_bytes(memory_cap) if memory_cap else default_memory_cap(), cache=cache,
        max_configs=max_configs, threads=1 if threads is None else threads, sources=sources or None,
        optimizer=optimizer, lr=lr, configs=_configs(config), targets=[] if from_traces else None)
    selection = TraceSelection(from_run, from_trace_set) if from_traces else None
    with open_store(ctx) as store:
        if selection is not None and from_run is not None:
            selection = TraceSelection(store.resolve_run_id(from_run), from_trace_set)
        _check(store, platform, new_platform, selection)
        if threads is None and from_trace_set is not None:  # measure as the trace ran (pmdb.traces.recorded)
            ran = recorded_threads(store, from_trace_set)
            options.threads = ran or 1
            typer.echo(f"measuring with {options.threads} intra-op thread(s): " + (
                f"trace set {from_trace_set} ran with them" if ran else "its trace set does not say (--threads)"))
        done = run_ops(store, platform, options, selection, peaks=peaks, progress=progress, on_traced=_traced)
    _report(done.summary, done.run_id)


def _check(store: Store, platform: Optional[str], new_platform: bool, selection=None) -> None:
    """Before anything is written: the platform is known (or --create-platform), the --from-run / --from-trace-set
    ids exist."""
    if platform is not None:
        platforms.check_known(store, platform, new=new_platform)
    if selection is not None and (selection.run_id is not None or selection.trace_set_id is not None):
        from collectors.ops.from_traces import select_trace_sets

        select_trace_sets(store, platform or "", selection.run_id, selection.trace_set_id)


def _traced(shapes, counts: list[dict]) -> None:
    """Print what the selected traces hold: distinct shapes, new ones, skipped ops."""
    typer.echo(f"trace sets {', '.join(map(str, shapes.trace_sets)) or 'none'}: "
               f"{sum(c['shapes'] for c in counts)} distinct op shapes, {sum(c['new'] for c in counts)} new, "
               f"{sum(shapes.skipped.values())} skipped")
    if counts:
        render(pd.DataFrame(counts))
    for reason, n in shapes.skipped.most_common(8):
        typer.echo(f"  skipped {n}x: {reason}")


def _report(summary: dict, run_id: str) -> None:
    skipped = ", ".join(f"{k} {v}" for k, v in summary["skipped"].items()) or "none"
    typer.echo(f"run {run_id}: {summary['configs_done']} configs measured, {summary['configs_resumed']} already "
               f"in the store, skipped: {skipped}; {summary['rows_written']} rows in {summary['wall_s']:.0f} s"
               + (f" (stopped: {summary['stopped']})" if summary["stopped"] else ""))
    if summary.get("resumed_runs"):
        typer.echo(f"  resumed {summary.get('rows_resumed', 0)} rows measured by interrupted or failed run(s) "
                   f"{', '.join(summary['resumed_runs'])}")
    for reason in summary["skip_reasons"][:5]:
        typer.echo(f"  skipped {reason}")
    if summary["per_op"]:
        render(pd.DataFrame(summary["per_op"]))


def peaks(ctx: typer.Context, platform: Optional[str] = typer.Option(None, "--platform", help=_PLATFORM_HELP),
          new_platform: bool = typer.Option(False, "--create-platform", help=_NEW_HELP)) -> None:
    """Measure this machine's roofline peaks (GEMM FLOP/s, memory bandwidth, host<->device on CUDA)."""
    from collectors.ops.run import run_peaks  # torch: loaded only when peaks are measured

    with open_store(ctx) as store:
        _check(store, platform, new_platform)
        rows = run_peaks(store, platform)
    render(pd.DataFrame([{"metric": r["metric"], "value": r["value"], "best_us": r["details"]["best_us"]}
                         for r in rows]))


def register(app: typer.Typer) -> None:
    app.command("ops")(ops)
    app.command("peaks")(peaks)
