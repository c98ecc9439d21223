"""``pmdb predict`` (simulate stored traces, store the prediction with its versions) and ``pmdb errors`` (error
statistics from SQL)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import full_run_id, limit_option, open_store, render, row_limit
from pmdb.cli.text_table import columns_last, terminal_width
from pmdb.errors import PmdbError
from pmdb.notes import wrapped
from simulator import error_stats as error_tables

if TYPE_CHECKING:  # pandas loads where a prediction is printed: `pmdb errors` prints plain rows
    import pandas as pd

    from simulator.request import PredictionRequest
    from simulator.store_rows import Prediction

WHAT = ("e2e", "kernel", "baseline", "side-by-side", "ranges")
ERROR_TABLE_ROWS = 30  # rows per `pmdb errors` table unless --limit says otherwise
ERROR_COLUMNS_LAST = ("measured_ms", "predicted_ms", "baseline_ms", "batch_size", "mode", "model_set_id",
                      "model_set")  # in the tables, after the errors
ERROR_LABELS = {  # short headers of the `pmdb errors` tables (csv and json keep the views' names)
    "world_size": "ws", "batch_size": "batch", "model_set_id": "models", "source_platform": "source",
    "geomean_pct": "gmae%", "min_pct": "min%", "max_pct": "max%", "mean_signed_pct": "signed%",
    "baseline_geomean_pct": "base%", "test_gmae_pct": "gmae%", "test_mape_pct": "mape%", "version": "ver",
    "cache_state": "cache", "prediction_id": "id", "measured_ms": "meas_ms", "predicted_ms": "pred_ms",
    "baseline_ms": "base_ms", "error_pct": "err%", "baseline_error_pct": "base_err%"}


def _ms(value: Any) -> str:
    import pandas as pd

    return "-" if value is None or pd.isna(value) else f"{value / 1000:.3f} ms"


def _show(pid: int, pred: Prediction, fmt: str) -> None:
    import pandas as pd

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
    if pred.spec_range is not None and fmt != "table":
        low, high = pred.spec_range.bounds(pred.predicted_us)
        summary["range_low_ms"], summary["range_high_ms"] = round(low / 1000, 3), round(high / 1000, 3)
    for pace, key in ((pred.memory_pace, "memory_pace"), (pred.compute_pace, "compute_pace")):
        if pace is not None:
            for column, value in ({key: _pace(pace, key, fmt)} if fmt == "table" else pace.to_json()).items():
                summary[column] = value
    if pred.llc_found is not None and fmt != "table":   # the table says it in a note
        summary["llc_found_64mib"] = round(pred.llc_found(64 * 2 ** 20), 4)
        summary["llc_found_source"] = pred.llc_found.source
    render(summary, fmt)
    if fmt != "table":
        return
    if pred.spec_range is not None:
        typer.echo("\n" + wrapped(_range_text(pred)))
    if pred.memory_pace is not None:
        typer.echo("\n" + wrapped(pred.memory_pace.sentence()))
    if pred.compute_pace is not None:
        typer.echo("\n" + wrapped(pred.compute_pace.sentence()))
    ranks = pd.DataFrame([{"rank": r.rank, "predicted_ms": round(r.predicted_us / 1000, 3),
                           "cpu_ms": round(r.cpu_us / 1000, 3), "compute_busy_ms": round(r.compute_busy_us / 1000, 3),
                           "comm_busy_ms": round(r.comm_busy_us / 1000, 3),
                           "comm_only_ms": round(r.comm_unoverlapped_us / 1000, 3),
                           "baseline_ms": round(r.baseline_us / 1000, 3), "ops": r.ops} for r in res.ranks])
    typer.echo("\n" + wrapped("per rank (streams: compute = calling thread on CPUs, comm = communication "
                               "thread/stream):"))
    render(ranks)
    if pred.phases_us:
        typer.echo("\n" + wrapped("per training phase (its ops alone, from an idle device):"))
        render(pd.DataFrame([{"phase": phase, "predicted_ms": round(us / 1000, 3)}
                             for phase, us in pred.phases_us.items()]))
    if pred.unmodelled:
        typer.echo("\n" + wrapped("ops not covered by a kernel model (fallback: roofline of the peaks, traced "
                                   "time, mined (median of rows mined from GPU traces; mined-self: from this "
                                   "trace, in-sample), or unpriced; shares of the traced step and of the "
                                   "predicted work):"))
        frame = pd.DataFrame(pred.unmodelled)
        for column in ("measured_share", "predicted_share"):
            if column in frame:
                frame[column] = frame[column].map(lambda v: "-" if v is None or pd.isna(v) else f"{100 * v:.1f}%")
        frame["op"] = frame["op"].str.replace("autograd::engine::evaluate_function: ", "bw: ", regex=False).str[:40]
        render(frame.head(15))


def _pace(pace: Any, key: str, fmt: str) -> str | float | None:
    """A memory- or compute-pace cell (``key`` of its ``to_json``): 'x1.25' in tables, the ratio in csv/json."""
    if pace is None:
        return None
    return pace.label() if fmt == "table" else pace.to_json()[key]


def _range_text(pred: Prediction) -> str:
    """One paragraph: the spec-only range and where each held-out GPU's error puts the step."""
    span = pred.spec_range
    gpus = ", ".join(f"{gpu} {us / 1000:.1f}" for gpu, us in sorted(span.per_gpu.items(), key=lambda kv: kv[1]))
    return (f"range {span.label_ms(pred.predicted_us)} ms: {pred.target_platform} is known by its spec sheet "
            f"only. The cross-GPU models that priced {100 * span.priced_share:.0f}% of the work were off on each "
            f"GPU they left out in testing; with each such GPU's error applied, the step is (ms): {gpus}. A new "
            f"GPU drawn like these {len(span.per_gpu)} would fall within their span about "
            f"{len(span.per_gpu) - 1} times in {len(span.per_gpu) + 1}"
            + (f"; but its sheet lies outside theirs ({span.outside_text()}), so it is not drawn like them: "
               f"the range is a guide, not a bound" if span.outside else "")
            + (f"; {span.lanes_text()}" if span.lanes else ""))


def predict(ctx: typer.Context,
            run_id: Optional[str] = typer.Argument(None, help="Workload run id (or its first 6+ characters, as "
                                                              "`pmdb runs` shows them): predict its captured trace "
                                                              "set and compare with its measured time."),
            trace_set: Optional[int] = typer.Option(None, "--trace-set", help="Predict this trace set id instead."),
            all_: bool = typer.Option(False, "--all", help="Predict every stored workload run of the platform, and "
                                                           "every imported trace set (on its own platform, or "
                                                           "--target-platform's), not yet predicted with the "
                                                           "current model versions and simulator rules."),
            mode: str = typer.Option("model", "--mode", help="model (fitted kernel/collective models and overheads) "
                                                             "or replay (kernel and CPU times from the trace itself)."),
            models: str = typer.Option("champion", "--models", help="Model versions: an alias (champion, latest) or "
                                                                    "a version spec (name:version,...)."),
            target_platform: Optional[str] = typer.Option(None, "--target-platform",
                                                          help="Use this platform's models and overheads (default: "
                                                               "the platform the trace was recorded on)."),
            cache_state: Optional[str] = typer.Option(None, "--cache-state",
                                                      help="CPU platforms: kernel models fitted on warm or cold "
                                                           "timings, blend (geometric mean of both), or reuse "
                                                           "(each op between them by its operands' reuse "
                                                           "distances in the LLC the run's memory probes found, "
                                                           "else an LRU cache of the platform's L2/LLC sizes). "
                                                           "Default on CPUs: reuse where the run (or the "
                                                           "platform's op sweeps) recorded the LLC it found, else "
                                                           "cold; device timings on GPUs. By default and with "
                                                           "reuse, an embedding lookup whose tables were timed in "
                                                           "a training loop ('loop') is priced by that."),
            overhead_version: Optional[int] = typer.Option(None, "--overhead-version",
                                                           help="Overhead table version (default: the latest of "
                                                                "the target platform)."),
            overheads_from: Optional[str] = typer.Option(None, "--overheads-from",
                                                         help="Borrow this platform's overhead table (same "
                                                              "semantics), e.g. for a GPU known only by its spec "
                                                              "sheet; the output names it. Default for a GPU "
                                                              "without a table: nvidia-h200's (today's host "
                                                              "path, shipped with pmdb)."),
            export_trace: Optional[Path] = typer.Option(None, "--export-trace", metavar="FILE",
                                                        help="Also write the simulated iteration as a Chrome trace "
                                                             "(Perfetto, chrome://tracing): one process per rank, "
                                                             "every op at its simulated time; gzipped if FILE "
                                                             "ends in .gz."),
            collectives: str = typer.Option("in-context", "--collectives",
                                            help="in-context: collectives priced by their in-context versions "
                                                 "(`pmdb fit comms-context`) where registered, else the plain "
                                                 "curve; plain: always the plain microbenchmark curve (stored "
                                                 "as the spec MODELS+plain)."),
            kernels: str = typer.Option("measured", "--kernels",
                                        help="measured: an op whose exact shape was microbenchmarked on the "
                                             "target, at the predicted thread count, is priced by that "
                                             "measurement's median, or else (GPU) mined from a trace of the "
                                             "target, by the mined calls' median ('mined'; 'mined-self' when "
                                             "from the predicted trace: in-sample); the rest by the models; "
                                             "models: every op by the models."),
            log_mlflow: bool = typer.Option(False, "--log-mlflow",
                                            help="Also log each prediction as an MLflow run (experiment "
                                                 "pmdb-predictions); off by default: loading MLflow adds ~2 s."),
            what_if: bool = typer.Option(False, "--what-if", help="Predict a configuration that was not run, "
                                                                  "derived from --trace-set ID (or RUN_ID): "
                                                                  "give --batch-size, --world-size or --sharder."),
            batch_size: Optional[int] = typer.Option(None, "--batch-size", help="With --what-if: the global batch "
                                                                                "size."),
            world_size: Optional[int] = typer.Option(None, "--world-size", help="With --what-if: data-parallel "
                                                                                "ranks (per-rank batch kept "
                                                                                "without --batch-size)."),
            sharder: list[str] = typer.Option([], "--sharder", metavar="NAME",
                                              help="With --what-if: a DLRM sharding plan (naive, random, "
                                                   "size_greedy, ...); repeatable, one prediction each."),
            recorded_batch: Optional[int] = typer.Option(None, "--recorded-batch",
                                                         help="With --what-if: the global batch of a trace set "
                                                              "that has no workload row (an imported trace)."),
            measure_shapes: bool = typer.Option(False, "--measure-shapes",
                                                help="With --what-if on this machine: first microbenchmark the "
                                                     "derived configuration's op shapes the store lacks (kernels "
                                                     "only, warm and cold) and refit those ops (new versions, "
                                                     "champions may move), then predict."),
            data_parallel: Optional[int] = typer.Option(None, "--data-parallel", metavar="D",
                                                        help="With --what-if: D data-parallel ranks (per-rank "
                                                             "batch divided, DDP's bucketed all-reduce)."),
            tensor_parallel: Optional[int] = typer.Option(None, "--tensor-parallel", metavar="T",
                                                          help="With --what-if: T-way Megatron tensor parallel "
                                                               "(heads and MLP columns split)."),
            pipeline_parallel: Optional[int] = typer.Option(None, "--pipeline-parallel", metavar="P",
                                                            help="With --what-if: P pipeline stages (1F1B)."),
            micro_batches: Optional[int] = typer.Option(None, "--micro-batches", metavar="M",
                                                        help="With --pipeline-parallel: micro-batches per step "
                                                             "(default 1)."),
            gpus: Optional[int] = typer.Option(None, "--gpus", metavar="N",
                                               help="With the parallel options: the GPUs D x T x P must fill."),
            megatron_fusions: bool = typer.Option(False, "--megatron-fusions",
                                                  help="With the parallel options: drop the eager passes "
                                                       "Megatron's fused bias-GELU and bias-dropout-add "
                                                       "(and, for fp16/bf16 captures, scale-mask-softmax) "
                                                       "kernels save (an estimate)."),
            fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json.")) -> None:
    """Predict the per-iteration time of a workload run or trace set (Algorithm 1 over all ranks), print it with
    the measured time and the error, and store it with the model and overhead versions used."""
    # the simulator loads torch: imported here, not by `pmdb --help` or the read-only commands
    from simulator.chrome_trace import check_destination, write_chrome_trace
    from simulator.model_set import with_collectives
    from simulator.predict import predict
    from simulator.request import PredictionRequest, resolve
    from simulator.store_rows import store_prediction

    if sum(x is not None and x is not False for x in (run_id, trace_set, all_ or None)) != 1:
        raise PmdbError("give exactly one of: a workload RUN_ID, --trace-set ID, --all")
    run_id = full_run_id(ctx, run_id)   # the 12 characters `pmdb runs` shows will do
    if export_trace is not None:
        if all_:
            raise PmdbError("--export-trace writes one prediction: give a RUN_ID or --trace-set, not --all")
        check_destination(export_trace)
    request = PredictionRequest(trace_set, run_id, mode, with_collectives(models, collectives), target_platform,
                                cache_state, overhead_version, overheads_from, kernels, export_trace is not None)
    request.check()
    parallel = {k: v for k, v in (("dp", data_parallel), ("tp", tensor_parallel), ("pp", pipeline_parallel),
                                  ("micro_batches", micro_batches), ("gpus", gpus),
                                  ("fused", megatron_fusions or None)) if v is not None}
    if what_if or batch_size is not None or world_size is not None or sharder or recorded_batch is not None \
            or measure_shapes or parallel:
        if not what_if:
            raise PmdbError("--batch-size, --world-size, --sharder, --recorded-batch, --measure-shapes and the "
                            "parallel options go with --what-if")
        if all_:
            raise PmdbError("--what-if derives from one trace set: give --trace-set ID, not --all")
        if export_trace is not None or log_mlflow:
            raise PmdbError("--export-trace and --log-mlflow go with a recorded trace set's prediction, not "
                            "--what-if")
        from pmdb.cli.whatif import what_if as derive_and_predict

        return derive_and_predict(ctx, request, batch_size=batch_size, world_size=world_size, sharders=sharder,
                                  recorded_batch=recorded_batch, fmt=fmt, measure_shapes=measure_shapes,
                                  parallel=parallel)
    with open_store(ctx) as store:
        if all_:
            ids = _predict_all(store, request, fmt)
            if log_mlflow and ids:
                _log_mlflow(store, ids, fmt)
            return
        resolved = resolve(store, request)   # every look-up and check once, before any run row
        with store.run("predict", resolved.target_platform, request.run_args()) as run:
            pred = predict(store, resolved)
            pid = store_prediction(store, run.run_id, pred)
            run.summary = {"prediction_id": pid, "predicted_us": pred.predicted_us, "measured_us": pred.measured_us,
                           "warnings": list(pred.warnings),
                           "llc_found": None if pred.llc_found is None else pred.llc_found.to_json()}
        _show(pid, pred, fmt)
        if log_mlflow:
            _log_mlflow(store, [pid], fmt)
    if export_trace is not None:
        events = write_chrome_trace(export_trace, pred)
        typer.echo(f"\nsimulated timeline ({events} events): {export_trace}", err=fmt != "table")


def _predict_all(store: Any, request: PredictionRequest, fmt: str) -> list[int]:
    """``--all``: the pending workload runs of the platform (the target, else this machine), then the pending
    imported trace sets (of the target, or of every platform, each on its own); an imported set that cannot be
    predicted is named and skipped. Returns the prediction ids."""
    import pandas as pd

    from simulator.pending import pending_requests
    from simulator.predict import predict_each

    target = request.target_platform
    platform = platforms.resolve(store, target)
    # one line for a bad spec or version, before any run row; the session then predicts the platform's sets
    sessions = {platform: request.session(store, platform)} if request.mode == "model" else {}
    todo = pending_requests(store, request, platform)
    if not todo:
        typer.echo(f"every workload run of {platform} with a trace set, and every imported trace set"
                   f"{'' if target is None else f' of {target}'}, is predicted with the current models")
        return []
    with store.run("predict", platform, {"all": True, **request.options()}) as run:
        done, warnings = predict_each(store, run.run_id, todo, sessions)
        run.summary = {"predictions": len(done), "warnings": warnings}
    ranged = any(pred.spec_range is not None for _, _, pred in done)
    paced = any(pred.memory_pace is not None for _, _, pred in done)
    computed = any(pred.compute_pace is not None for _, _, pred in done)
    render(pd.DataFrame([{"prediction_id": pid, "workload_run": item.workload_run_id, "trace_set": pred.trace_set_id,
                          "target": pred.target_platform, "predicted_ms": round(pred.predicted_us / 1000, 3),
                          "measured_ms": None if pred.measured_us is None else round(pred.measured_us / 1e3, 3),
                          "error_pct": None if pred.rel_error is None else round(100 * pred.rel_error, 2),
                          **({"range_ms": pred.range_ms} if ranged else {}),
                          **({"memory_pace": _pace(pred.memory_pace, "memory_pace", fmt)} if paced else {}),
                          **({"compute_pace": _pace(pred.compute_pace, "compute_pace", fmt)} if computed else {})}
                         for item, pid, pred in done]), fmt)
    return [pid for _, pid, _ in done]


def _log_mlflow(store: Any, prediction_ids: list[int], fmt: str) -> None:
    from simulator.mlflow_log import log_predictions

    runs = log_predictions(store, prediction_ids)
    typer.echo(f"\nlogged to MLflow (experiment pmdb-predictions): {len(runs)} run(s)"
               + (f", {runs[0]}" if len(runs) == 1 else ""), err=fmt != "table")


def errors(ctx: typer.Context,
           by: Optional[str] = typer.Option(None, "--by", help="Group E2E errors by these columns (comma-separated: "
                                                                + ", ".join(error_tables.E2E_KEYS) + "; default "
                                                                + ",".join(error_tables.E2E_DEFAULT) + ")."),
           kernel_by: Optional[str] = typer.Option(None, "--kernel-by",
                                                   help="Group kernel-model errors by these columns ("
                                                        + ", ".join(error_tables.KERNEL_KEYS) + "; default "
                                                        + ",".join(error_tables.KERNEL_DEFAULT) + ")."),
           what: str = typer.Option("e2e,kernel", "--what", help="Tables to print: e2e, kernel, baseline, "
                                                                 "side-by-side, ranges (comma-separated) or all."),
           mode: Optional[str] = typer.Option(None, "--mode", help="Only predictions of this mode (model, replay)."),
           champions: bool = typer.Option(False, "--champions", help="Kernel errors of champion versions only."),
           platform: Optional[str] = typer.Option(None, "--platform",
                                                  help="Only predictions for this target platform and models of "
                                                       "this platform (default: every platform)."),
           limit: int = limit_option(ERROR_TABLE_ROWS, "At most this many rows per table (0: all); csv and json "
                                                       "get every row."),
           fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json (every column, "
                                                             "names as in the views).")) -> None:
    """Kernel-model test errors and end-to-end prediction errors (geomean |e|, min, max, n), computed in SQL over
    completed runs (views v_kernel_model_errors, v_prediction_errors, v_e2e_errors)."""
    chosen = list(WHAT) if what == "all" else [w.strip() for w in what.split(",") if w.strip()]
    bad = [w for w in chosen if w not in WHAT]
    if bad or not chosen:
        raise PmdbError(f"bad --what {what!r}: use {', '.join(WHAT)} or all")
    if mode is not None and mode not in ("model", "replay"):
        raise PmdbError(f"bad --mode {mode!r}: use model or replay")
    cap = row_limit(limit)
    with open_store(ctx, read_only=True) as store:
        if platform is not None:
            platforms.load(store, platform)  # the one-line unknown-platform error
        tables = {
            "e2e": ("end-to-end prediction errors (% of measured)",
                    lambda plain: error_tables.e2e_errors(store, by, mode, platform, plain=plain)),
            "kernel": ("kernel/collective model test errors (held-out split, %)",
                       lambda plain: error_tables.kernel_errors(store, kernel_by, champions, platform, plain=plain)),
            "baseline": ("predictions beside the baseline (sum of kernel times per stream)",
                         lambda plain: error_tables.named(store, "prediction_vs_baseline", plain=plain)),
            "side-by-side": ("the same trace set predicted by two model-version sets",
                             lambda plain: error_tables.named(store, "model_sets_side_by_side", plain=plain)),
            "ranges": ("spec-only GPUs: measured runs inside their predicted range",
                       lambda plain: error_tables.named(store, "spec_range_coverage", plain=plain))}
        for name in chosen:
            title, make = tables[name]
            if fmt != "table":
                render(make(False), fmt)
                continue
            typer.echo(f"\n{title}:")
            render(columns_last(make(True), ERROR_COLUMNS_LAST), limit=cap,  # the errors first
                   labels=ERROR_LABELS, lift=("platform", "mode", "model_set_id"),
                   legend=("model_set_id", "model_set"))
            note = error_tables.self_priced_note(store, mode, platform) if name == "e2e" else None
            if note:
                typer.echo(textwrap.fill(f"({note})", terminal_width(), break_on_hyphens=False))


def register(app: typer.Typer) -> None:
    app.command()(predict)
    app.command()(errors)
