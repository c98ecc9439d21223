"""``pmdb predict`` (simulate stored traces, store the prediction with its versions) and ``pmdb errors`` (error
statistics from SQL)."""
from __future__ import annotations

from typing import Any, Optional

import pandas as pd
import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError
from simulator import error_stats as error_tables
from simulator.model_set import check_cache_state
from simulator.predict import pending_runs, predict_and_store
from simulator.store_rows import Prediction

WHAT = ("e2e", "kernel", "baseline", "side-by-side")


def _ms(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{value / 1000:.3f} ms"


def _show(pid: int, pred: Prediction, fmt: str) -> None:
    res = pred.result
    err = pred.rel_error
    summary = pd.DataFrame([{
        "prediction_id": pid, "trace_set": pred.trace_set_id, "mode": pred.mode, "target": pred.target_platform,
        "predicted_ms": round(pred.predicted_us / 1000, 3), "isolated_ms": round(res.predicted_us / 1000, 3),
        "measured_ms": None if pred.measured_us is None else round(pred.measured_us / 1000, 3),
        "error_pct": None if err is None else round(100 * err, 2),
        "baseline_ms": round(res.baseline_us / 1000, 3), "device_active_ms": round(res.device_active_us / 1000, 3),
        "comm_only_pct": round(100 * res.comm_unoverlapped_frac, 2), "models": len(pred.models),
        "overhead_version": pred.overhead_version, "elapsed_s": round(pred.elapsed_s, 3)}])
    render(summary, fmt)
    if fmt != "table":
        return
    ranks = pd.DataFrame([{"rank": r.rank, "predicted_ms": round(r.predicted_us / 1000, 3),
                           "cpu_ms": round(r.cpu_us / 1000, 3), "compute_busy_ms": round(r.compute_busy_us / 1000, 3),
                           "comm_busy_ms": round(r.comm_busy_us / 1000, 3),
                           "comm_only_ms": round(r.comm_unoverlapped_us / 1000, 3),
                           "baseline_ms": round(r.baseline_us / 1000, 3), "ops": r.ops} for r in res.ranks])
    typer.echo("\nper rank (streams: compute = calling thread on CPUs, comm = communication thread/stream):")
    render(ranks)
    if pred.phases_us:
        typer.echo("\nper training phase (its ops alone, from an idle device):")
        render(pd.DataFrame([{"phase": phase, "predicted_ms": round(us / 1000, 3)}
                             for phase, us in pred.phases_us.items()]))
    if pred.unmodelled:
        typer.echo("\nops not covered by a kernel model (fallback: roofline of the peaks, traced time, or "
                   "unpriced; shares of the traced step and of the predicted work):")
        frame = pd.DataFrame(pred.unmodelled)
        for column in ("measured_share", "predicted_share"):
            if column in frame:
                frame[column] = frame[column].map(lambda v: "-" if v is None or pd.isna(v) else f"{100 * v:.1f}%")
        frame["op"] = frame["op"].str.replace("autograd::engine::evaluate_function: ", "bw: ", regex=False).str[:40]
        render(frame.head(15))


def predict(ctx: typer.Context,
            run_id: Optional[str] = typer.Argument(None, help="Workload run id: predict its captured trace set and "
                                                              "compare with its measured time."),
            trace_set: Optional[int] = typer.Option(None, "--trace-set", help="Predict this trace set id instead."),
            all_: bool = typer.Option(False, "--all", help="Predict every stored workload run of the platform not yet "
                                                           "predicted with the current model versions."),
            mode: str = typer.Option("model", "--mode", help="model (fitted kernel/collective models and overheads) "
                                                             "or replay (kernel and CPU times from the trace itself)."),
            models: str = typer.Option("champion", "--models", help="Model versions: an alias (champion, latest) or "
                                                                    "a version spec (name:version,...)."),
            target_platform: Optional[str] = typer.Option(None, "--target-platform",
                                                          help="Use this platform's models and overheads (default: "
                                                               "the platform the trace was recorded on)."),
            cache_state: Optional[str] = typer.Option(None, "--cache-state",
                                                      help="CPU platforms: kernel models fitted on warm or cold "
                                                           "timings, or blend (geometric mean of both); default "
                                                           "cold on CPUs, device timings on GPUs."),
            overhead_version: Optional[int] = typer.Option(None, "--overhead-version",
                                                           help="Overhead table version (default: the latest of "
                                                                "the target platform)."),
            overheads_from: Optional[str] = typer.Option(None, "--overheads-from",
                                                         help="Borrow this platform's overhead table (same "
                                                              "semantics), e.g. for a GPU known only by its spec "
                                                              "sheet; the output names it."),
            fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json.")) -> None:
    """Predict the per-iteration time of a workload run or trace set (Algorithm 1 over all ranks), print it with
    the measured time and the error, and store it with the model and overhead versions used."""
    if sum(x is not None and x is not False for x in (run_id, trace_set, all_ or None)) != 1:
        raise PmdbError("give exactly one of: a workload RUN_ID, --trace-set ID, --all")
    check_cache_state(cache_state)
    options = dict(mode=mode, models=models, target_platform=target_platform, cache_state=cache_state,
                   overhead_version=overhead_version, overheads_from=overheads_from)
    with open_store(ctx) as store:
        platform = platforms.resolve(store, target_platform)
        if all_:
            todo = pending_runs(store, platform, models, cache_state)
            if not todo:
                typer.echo(f"every workload run of {platform} with a trace set is predicted with the current models")
                return
            with store.run("predict", platform, {"all": True, **options}) as run:
                rows, warnings = [], []
                for workload_run in todo:
                    pid, pred = predict_and_store(store, run.run_id, workload_run_id=workload_run, **options)
                    warnings += [f"{workload_run}: {w}" for w in pred.warnings]
                    rows.append({"prediction_id": pid, "workload_run": workload_run, "trace_set": pred.trace_set_id,
                                 "predicted_ms": round(pred.predicted_us / 1000, 3),
                                 "measured_ms": None if pred.measured_us is None else round(pred.measured_us / 1e3, 3),
                                 "error_pct": None if pred.rel_error is None else round(100 * pred.rel_error, 2)})
                run.summary = {"predictions": len(rows), "warnings": warnings}
            render(pd.DataFrame(rows), fmt)
            return
        with store.run("predict", platform, {"run_id": run_id, "trace_set": trace_set, **options}) as run:
            pid, pred = predict_and_store(store, run.run_id, trace_set_id=trace_set, workload_run_id=run_id,
                                          **options)
            run.summary = {"prediction_id": pid, "predicted_us": pred.predicted_us, "measured_us": pred.measured_us,
                           "warnings": list(pred.warnings)}
    _show(pid, pred, fmt)


def errors(ctx: typer.Context,
           by: Optional[str] = typer.Option(None, "--by", help="Group E2E errors by these columns (comma-separated: "
                                                                + ", ".join(error_tables.E2E_KEYS) + "; default "
                                                                + ",".join(error_tables.E2E_DEFAULT) + ")."),
           kernel_by: Optional[str] = typer.Option(None, "--kernel-by",
                                                   help="Group kernel-model errors by these columns ("
                                                        + ", ".join(error_tables.KERNEL_KEYS) + "; default "
                                                        + ",".join(error_tables.KERNEL_DEFAULT) + ")."),
           what: str = typer.Option("e2e,kernel", "--what", help="Tables to print: e2e, kernel, baseline, "
                                                                 "side-by-side (comma-separated) or all."),
           mode: Optional[str] = typer.Option(None, "--mode", help="Only predictions of this mode (model, replay)."),
           champions: bool = typer.Option(False, "--champions", help="Kernel errors of champion versions only."),
           platform: Optional[str] = typer.Option(None, "--platform",
                                                  help="Only predictions for this target platform and models of "
                                                       "this platform (default: every platform)."),
           fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json.")) -> None:
    """Kernel-model test errors and end-to-end prediction errors (geomean |e|, min, max, n), computed in SQL over
    completed runs (views v_kernel_model_errors, v_prediction_errors, v_e2e_errors)."""
    chosen = list(WHAT) if what == "all" else [w.strip() for w in what.split(",") if w.strip()]
    bad = [w for w in chosen if w not in WHAT]
    if bad or not chosen:
        raise PmdbError(f"bad --what {what!r}: use {', '.join(WHAT)} or all")
    if mode is not None and mode not in ("model", "replay"):
        raise PmdbError(f"bad --mode {mode!r}: use model or replay")
    with open_store(ctx, read_only=True) as store:
        known = store.query("SELECT name FROM platforms ORDER BY name")["name"].tolist()
        if platform is not None and platform not in known:
            raise PmdbError(f"unknown platform {platform!r} (known: {', '.join(known) or 'none'})")
        tables = {
            "e2e": ("end-to-end prediction errors (% of measured)",
                    lambda: error_tables.e2e_errors(store, by, mode, platform)),
            "kernel": ("kernel/collective model test errors (held-out split, %)",
                       lambda: error_tables.kernel_errors(store, kernel_by, champions, platform)),
            "baseline": ("predictions beside the baseline (sum of kernel times per stream)",
                         lambda: error_tables.named(store, "prediction_vs_baseline")),
            "side-by-side": ("the same trace set predicted by two model-version sets",
                             lambda: error_tables.named(store, "model_sets_side_by_side"))}
        for name in chosen:
            title, make = tables[name]
            if fmt == "table":
                typer.echo(f"\n{title}:")
            render(make(), fmt)


def register(app: typer.Typer) -> None:
    app.command()(predict)
    app.command()(errors)
