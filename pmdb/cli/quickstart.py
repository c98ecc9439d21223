"""``pmdb quickstart``: the whole loop on this machine with a reduced default asset set (what ``make demo`` runs).

measure (ops, comms, workloads) -> fit (kernel/collective models, overheads) -> predict -> error table -> report.
Each step is the ordinary pmdb command it names; a step that completed before is not run again (resumable).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import typer

from pmdb.cli.common import workspace
from pmdb.errors import PmdbError
from pmdb.store import Store


@dataclass(frozen=True)
class Step:
    name: str           # unique step label, recorded when the step completes
    args: tuple[str, ...]  # the pmdb command line of the step
    what: str           # one-line description shown while it runs


_TRANSFORMER = ("--layers", "2", "--hidden", "64", "--heads", "4", "--seq-len", "64", "--batch-size", "8",
                "--iters", "20", "--warmup", "5")
_DLRM = ("--preset", "dlrm_test", "--iters", "20", "--warmup", "5")


def steps(report_dir: str) -> list[Step]:
    """The reduced default asset set, in order."""
    plan = [
        Step("ops", ("collect", "ops", "--sweep", "quick"), "kernel microbenchmarks (quick grid, warm and cold)"),
        Step("comms", ("collect", "comms", "--world-size", "2", "--max-bytes", "16MiB", "--iters", "10",
                       "--warmup", "3", "--random-splits", "1"), "collective sweep at world size 2 (gloo)"),
        Step("dlrm-ws1", ("collect", "workload", "dlrm", *_DLRM, "--world-size", "1"), "DLRM at world size 1"),
    ]
    for sharder in ("naive", "size_greedy", "lookup_greedy", "size_lookup_greedy"):
        plan.append(Step(f"dlrm-ws2-{sharder}", ("collect", "workload", "dlrm", *_DLRM, "--world-size", "2",
                                                 "--sharder", sharder), f"DLRM at world size 2, {sharder} sharding"))
    for arch in ("gpt2", "bert", "xlnet"):
        plan.append(Step(f"{arch}-ws1", ("collect", "workload", "transformer", "--arch", arch, *_TRANSFORMER),
                         f"{arch} training at world size 1"))
    plan += [
        Step("ops-from-traces", ("collect", "ops", "--from-traces"),
             "kernel microbenchmarks of the op shapes the recorded workloads contain (shapes only, no timings)"),
        Step("fit", ("fit", "--all", "--budget-minutes", "6"), "fit kernel and collective models (MLflow registry)"),
        Step("overheads", ("fit", "overheads"), "extract CPU overheads from the traces"),
        Step("predict", ("predict", "--all"), "predict every workload run from its traces"),
        Step("errors", ("errors",), "error statistics from SQL"),
        Step("report", ("report", "-o", report_dir), "report: figures and an HTML page"),
    ]
    return plan


def _done(home, name: str) -> bool:
    with Store.open(home) as store:
        return bool(store.scalar(
            "SELECT count(*) FROM collection_runs WHERE kind = 'quickstart' AND status = 'completed' "
            "AND args->>'$.step' = ?", [name]))


def _mark_done(home, name: str, seconds: float) -> None:
    with Store.open(home) as store:
        with store.run("quickstart", None, {"step": name}) as run:
            run.summary["seconds"] = round(seconds, 1)


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
            typer.echo(f"{step.name:28s} pmdb {' '.join(step.args)}")
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
        typer.echo(f"{header}\n    pmdb {' '.join(step.args)}")
        t0 = time.monotonic()
        code = main(["--home", str(ws.home), *step.args])
        if code == 130:
            raise KeyboardInterrupt
        if code != 0:
            raise PmdbError(f"quickstart step {step.name!r} failed (exit {code}); what completed is kept: "
                            f"run `pmdb quickstart` again to resume")
        _mark_done(ws, step.name, time.monotonic() - t0)
        typer.echo(f"    done in {time.monotonic() - t0:.0f} s")
    typer.echo(f"quickstart finished in {(time.monotonic() - started) / 60:.1f} min; "
               f"report in {ws.reports_dir}/index.html")


def register(app: typer.Typer) -> None:
    app.command()(quickstart)
