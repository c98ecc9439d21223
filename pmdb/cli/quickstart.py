"""``pmdb quickstart``: the whole loop on this machine with a reduced default asset set (what ``make demo`` runs).

measure (ops, comms, workloads) -> fit (kernel/collective models, overheads) -> predict -> a GPU what-if from the
sample shipped in ``pmdb/samples/gpu`` -> error table -> report, then a one-screen summary (``report.summary``).
Each step is the ordinary pmdb command it names; a step that completed before is not run again (resumable).
"""
from __future__ import annotations

import os
import textwrap
import time
from dataclasses import dataclass
from typing import Callable

import typer

from pmdb.cli.common import workspace
from pmdb.errors import PmdbError
from pmdb.store_check import pmdb_command
from pmdb.store import RUN_ID_SHOWN, Store


@dataclass(frozen=True)
class Step:
    name: str           # unique step label, recorded when the step completes
    args: tuple[str, ...]  # the pmdb command line of the step
    what: str           # one-line description shown while it runs
    more: Callable[[Store], tuple[str, ...]] | None = None  # arguments only known when it runs (from the store)
    settled: Callable[[Store], str | None] | None = None  # why the step is not needed (the store says), or None
    more_shown: str = "--trace-set ID..."  # what ``more`` adds, as `pmdb quickstart --list` shows it


# Ground truth in 3-5 launches of fresh processes (median of their medians). The first launch of each run also
# traces it; the others are relaunches (`pmdb collect relaunch`), one per run before each later round of the traced
# shapes' prices, so that truths and prices sample the same minutes: on the 48 MiB-L3 Intel host a transformer's
# launches moved by up to 30% within 15 s and the step's slowest quarter of windows ran x1.34 its fastest
# (host_phase_bert), while a run's launches back to back sampled one phase and the prices another. One
# configuration's launch medians spread 5-11% at world size 1 and ~20% at world size 2 on the AMD host; once 3
# launches lie within 3% of each other the run is not relaunched (collectors.workloads.collect.LAUNCH_TOLERANCE).
TRUTH_MIN_REPEATS = "3"
_TRANSFORMER = ("--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--batch-size", "8",
                "--iters", "20", "--warmup", "5")
# world-size-2 steps spread 70-145% over iterations on a 2-core host: a median of 20 moves by ~10%, of 100 by ~5%
_DLRM = ("--preset", "dlrm_mixed", "--iters", "100", "--warmup", "10")
# the traced shapes measured in up to this many processes (the prices are medians over them): between two processes
# the cold time of one shape moved by ~20% (median over shapes) and a whole round of embedding lookups by up to 27%
# on the AMD host; rounds after the third run only while the rounds disagree (collectors.ops.shape_rounds)
SHAPE_ROUNDS = 5
# world-size-2 DLRM runs (random sharding) that only train the in-context term: seeds whose plans differ from each
# other and from every judged sharder's, ranks swapped or not (seed 3 drew seed 2's plan: one workload twice)
CALIBRATION_SEEDS = (1, 2, 5)
CALIBRATION_TRACE_ITERS = "5"


def calibration_steps() -> list[Step]:
    """World-size-2 runs recorded only to learn the collectives' in-context term from: random table sharding
    (none of the judged runs' sharders), other seeds, more profiled iterations. Their own predictions are in-sample,
    and the summary leaves them out."""
    return [Step(f"dlrm-ws2-calibration-{seed}", ("collect", "workload", "dlrm", *_DLRM, "--world-size", "2",
                                                  "--sharder", "random", "--seed", str(seed), "--trace-iters",
                                                  CALIBRATION_TRACE_ITERS),
                 f"DLRM at world size 2, random sharding, seed {seed} (calibration of the collectives in context)")
            for seed in CALIBRATION_SEEDS]


# the collection runs the completed quickstart steps named by the parameter recorded (their markers name the runs)
_STEP_RUNS = ("SELECT DISTINCT u.r AS run_id FROM collection_runs q, "
              "unnest(CAST(q.summary->'$.runs' AS VARCHAR[])) u(r) "
              "WHERE q.kind = 'quickstart' AND q.status = 'completed' AND list_contains(?, q.args->>'$.step')")


def calibration_trace_sets(store: Store) -> tuple[str, ...]:
    """``--trace-set ID`` for each trace set the calibration steps recorded."""
    names = [s.name for s in calibration_steps()]
    frame = store.query(f"SELECT DISTINCT t.trace_set_id FROM ({_STEP_RUNS}) s JOIN trace_sets t USING (run_id) "
                        "ORDER BY 1", [names])
    if frame.empty:
        raise PmdbError("no calibration trace set recorded: run the quickstart's calibration steps first "
                        "(`pmdb quickstart --list`)")
    return tuple(arg for ts in frame["trace_set_id"] for arg in ("--trace-set", str(int(ts))))
GPU_FIT_BUDGET_MINUTES = "2"   # the GPU what-if's fit (gbdt, the GEMM tables' champion family; 2 candidates per
#                               op, ~20-40 s): only a safety cap, the counted work decides the models
# ... on one process: its 10 short searches took 30 / 49 s with --jobs 1 and 53 / 73 s with 2 worker processes
# (their start-up: torch and scikit-learn imported twice), interleaved, on the 48 MiB-L3 Intel host beside a
# running test suite, 2026-11-29
GPU_FIT_JOBS = "1"


def gpu_steps() -> list[Step]:
    """Predict a training step measured on a real V100 from the shipped sample only (no GPU, no ../shared): the
    kernel models are fitted on the sample's kernel tables, never on the measured step."""
    from pmdb.samples import gpu

    what = "GPU what-if: "
    return [
        Step("gpu-spec", ("platform-specs", str(gpu.SPEC_SHEET)), what + "register the V100's spec sheet"),
        Step("gpu-kernels", ("collect", "import-ops", str(gpu.KERNELS), "--format", "neusight", "--platform",
                             gpu.PLATFORM), what + "import the V100 kernel-table sample (NeuSight)"),
        Step("gpu-fit", ("fit", "--platform", gpu.PLATFORM, "--all", "--family", "gbdt", "--budget-minutes",
                         GPU_FIT_BUDGET_MINUTES, "--jobs", GPU_FIT_JOBS, "--no-progress", "--summary"),
             what + "fit the V100's kernel models on the sample"),
        Step("gpu-capture", ("collect", "workload", "transformer", "--graph-only", "--config", str(gpu.MODEL_CONFIG),
                             "--batch-size", str(gpu.BATCH_SIZE), "--seq-len", str(gpu.SEQ_LEN)),
             what + "capture the BERT-large training step shape-only on this CPU"),
        Step("gpu-truth", ("collect", "import-e2e", str(gpu.LABEL), "--format", "neusight", "--platform",
                           gpu.PLATFORM, "--model-configs", str(gpu.MODEL_CONFIGS)),
             what + "import that step as measured on a real V100 (ground truth)"),
        Step("gpu-predict", ("predict", "--all", "--target-platform", gpu.PLATFORM),
             what + "predict the step on the V100 with its kernel models"),
    ]


def steps(report_dir: str) -> list[Step]:
    """The reduced default asset set, in order."""
    plan = [
        Step("ops", ("collect", "ops", "--sweep", "quick"), "kernel microbenchmarks (quick grid, warm and cold)"),
        Step("comms", ("collect", "comms", "--world-size", "2", "--max-bytes", "16MiB", "--iters", "30",
                       "--warmup", "3", "--random-splits", "1"), "collective sweep at world size 2 (gloo)"),
        Step("dlrm-ws1", ("collect", "workload", "dlrm", *_DLRM, "--world-size", "1"), "DLRM at world size 1"),
    ]
    for sharder in ("naive", "size_greedy", "lookup_greedy", "size_lookup_greedy"):
        plan.append(Step(f"dlrm-ws2-{sharder}", ("collect", "workload", "dlrm", *_DLRM, "--world-size", "2",
                                                 "--sharder", sharder), f"DLRM at world size 2, {sharder} sharding"))
    plan += calibration_steps()
    for arch in ("gpt2", "bert", "xlnet"):
        plan.append(Step(f"{arch}-ws1", ("collect", "workload", "transformer", "--arch", arch, *_TRANSFORMER),
                         f"{arch} training at world size 1"))
    workload_steps = [step.name for step in plan if step.args[:2] == ("collect", "workload")]   # relaunched below
    plan.append(Step("ops-from-traces", ("collect", "ops", "--from-traces"),
                     "kernel microbenchmarks of the op shapes the recorded workloads contain (shapes only, no "
                     "timings)"))
    for k in range(2, SHAPE_ROUNDS + 1):
        plan.append(Step(f"truth-{k}", ("collect", "relaunch", "--launches", "1", "--min-launches",
                                        TRUTH_MIN_REPEATS),
                         f"every workload run launched once more, added to its ground truth ({k} of "
                         f"{SHAPE_ROUNDS}: truths are medians)", lambda store: workload_run_ids(store, workload_steps),
                         more_shown="RUN..."))
        plan.append(Step(f"ops-from-traces-{k}", ("collect", "ops", "--from-traces", "--force"),
                         f"the same shapes measured again in a fresh process ({k} of {SHAPE_ROUNDS}: prices are "
                         f"medians)", settled=_shape_rounds_settled if k > 3 else None))
    plan += [
        Step("fit", ("fit", "--all", "--budget-minutes", "5", "--summary"),
             "fit kernel and collective models (MLflow registry)"),
        Step("overheads", ("fit", "overheads"), "extract CPU overheads from the traces"),
        Step("comms-context", ("fit", "comms-context", "--target", "step"), "calibrate the collectives' "
             "in-context factor on the calibration runs' steps", calibration_trace_sets),
        Step("predict", ("predict", "--all"), "predict every workload run from its traces"),
        *gpu_steps(),
        Step("errors", ("errors",), "error statistics from SQL"),
        Step("report", ("report", "-o", report_dir), "report: figures and an HTML page"),
    ]
    return plan


def workload_run_ids(store: Store, names: list[str]) -> tuple[str, ...]:
    """The measured workload runs the quickstart steps ``names`` completed, oldest first (``pmdb collect relaunch``'s
    arguments)."""
    frame = store.query(f"SELECT w.run_id FROM ({_STEP_RUNS}) s JOIN workload_runs w USING (run_id) "
                        "JOIN collection_runs c USING (run_id) ORDER BY c.started_at", [names])
    if frame.empty:
        raise PmdbError("no workload run recorded: run the quickstart's workload steps first (`pmdb quickstart "
                        "--list`)")
    return tuple(run_id[:RUN_ID_SHOWN] for run_id in frame["run_id"])


def _shape_rounds_settled(store: Store) -> str | None:
    from collectors.ops.shape_rounds import rounds_settled

    return rounds_settled(store)


def _done(home, name: str) -> bool:
    with Store.open(home) as store:
        return bool(store.scalar(
            "SELECT count(*) FROM collection_runs WHERE kind = 'quickstart' AND status = 'completed' "
            "AND args->>'$.step' = ?", [name]))


def _mark_done(home, name: str, seconds: float, runs: list[str] | None = None) -> None:
    """Record a completed step, with the collection runs it completed (``runs``)."""
    with Store.open(home) as store:
        with store.run("quickstart", None, {"step": name}) as run:
            run.summary["seconds"] = round(seconds, 1)
            run.summary["runs"] = list(runs or [])


def _completed_runs(home) -> set[str]:
    with Store.open(home, read_only=True) as store:
        frame = store.query("SELECT run_id FROM collection_runs WHERE status = 'completed' AND kind <> 'quickstart'")
    return set(frame["run_id"])


def quickstart(ctx: typer.Context,
               only: list[str] = typer.Option(None, "--only", help="Run only these steps (repeatable); see --list."),
               list_: bool = typer.Option(False, "--list", help="List the steps and exit."),
               again: bool = typer.Option(False, "--again", help="Run steps again even if they completed before.")
               ) -> None:
    """Collect a reduced default asset set on this machine, fit, predict and print the errors (resumable)."""
    from pmdb.cli.main import main

    ws = workspace(ctx)
    plan = steps(str(ws.reports_dir))
    if list_:
        for step in plan:
            more = f" {step.more_shown} (known when it runs)" if step.more else ""
            typer.echo(f"{step.name:28s} pmdb {' '.join(step.args)}{more}")
        return
    unknown = set(only or []) - {s.name for s in plan}
    if unknown:
        raise PmdbError(f"unknown quickstart step(s): {', '.join(sorted(unknown))} (see `pmdb quickstart --list`)")
    Store.open(ws, create=True).close()
    selected = [s for s in plan if not only or s.name in only]
    started = time.monotonic()
    for number, step in enumerate(selected, 1):
        header = f"[{number}/{len(selected)}] {step.what}"
        if not again and step.name not in ("errors", "report") and _done(ws, step.name):
            typer.echo(f"{header}: done before, reused")
            continue
        if step.settled is not None:
            with Store.open(ws, read_only=True) as store:
                reason = step.settled(store)
            if reason:
                typer.echo(f"{header}: not needed, {reason}")
                _mark_done(ws, step.name, 0.0)
                continue
        args = step.args
        if step.more is not None:
            with Store.open(ws, read_only=True) as store:
                args = (*args, *step.more(store))
        command = textwrap.wrap(f"pmdb {' '.join(args)}", 76, break_long_words=False, break_on_hyphens=False)
        typer.echo("\n".join([*textwrap.wrap(header, 80, subsequent_indent="    "),
                              *(("    " if k == 0 else "        ") + line for k, line in enumerate(command))]))
        t0 = time.monotonic()
        before = _completed_runs(ws)
        code = main(["--home", str(ws.home), *args])
        if code == 130:
            raise KeyboardInterrupt
        if code != 0:
            raise PmdbError(f"quickstart step {step.name!r} failed (exit {code}); what completed is kept: "
                            f"run `{pmdb_command(ws, 'quickstart')}` again to resume")
        _mark_done(ws, step.name, time.monotonic() - t0, sorted(_completed_runs(ws) - before))
        typer.echo(f"    done in {time.monotonic() - t0:.0f} s")
    print_summary(ws, f"== quickstart finished in {(time.monotonic() - started) / 60:.1f} min; latest "
                      f"model-mode prediction of each run:")


def print_summary(ws, title: str) -> None:
    """The one-screen summary (report.summary): at most 24 lines of at most 80 columns, ``title`` first."""
    from report.summary import render, summarize

    with Store.open(ws, read_only=True) as store:
        summary = summarize(store)
    report = ws.reports_dir / "index.html"
    shown = os.path.relpath(report)    # `make demo`: pmdb-workspace/reports/index.html
    for line in render(summary, str(report) if shown.startswith("..") else shown, title=title):
        typer.echo(line)


def register(app: typer.Typer) -> None:
    app.command()(quickstart)
