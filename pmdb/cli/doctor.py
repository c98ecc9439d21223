"""``pmdb doctor [--repair]``: one line per health check of the workspace (the store opens, write-ahead log,
migrations, every table read in full, runs left 'running', the MLflow registry against the store's mirror), with
the exact command that fixes a problem; ``--repair`` fixes what it can without losing anything."""
from __future__ import annotations

import textwrap

import typer

from pmdb.cli.common import workspace
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.store_check import Check, check_opened, open_read_only

WIDTH = 80          # every line fits this many columns (fix commands excepted: they are printed whole)
_NAME_WIDTH = 11


def _line(check: Check) -> str:
    head = f"{'ok' if check.ok else 'problem':<8}{check.name:<{_NAME_WIDTH}}"
    text = check.text if len(head) + len(check.text) <= WIDTH else check.text[:WIDTH - len(head) - 1] + "…"
    return head + text


def _checks(ctx: typer.Context) -> tuple[list[Check], list[str]]:
    """Every check, read-only (nothing is written, a missing mlflow.db is not created); and the stale run ids."""
    ws = workspace(ctx)
    with open_read_only(ws) as (store, opened):
        if store is None:
            return opened, []
        found, stale = check_opened(store)
        from fitters.registry_mirror import checks as registry_checks

        try:
            registry, _ = registry_checks(store, ws)
        except PmdbError as exc:  # a tracking server that does not answer, a registry that fails
            text = str(exc)
            head, _, advice = text.replace("the MLflow tracking server at", "server").partition(": start it, ")
            registry = [Check("registry", False, head, f"start it, {advice}" if advice else None)]
        return [*opened, *found, *registry], stale


def _repair(ctx: typer.Context, checks: list[Check], stale: list[str]) -> list[str]:
    """Repair what ``checks`` found repairable; one line per thing done."""
    ws = workspace(ctx)
    done = []
    by_name = {c.name: c for c in checks if not c.ok}
    with Store.open(ws, command="pmdb doctor --repair") as store:  # applies pending migrations, marks stale runs
        if "migrations" in by_name:
            done.append("applied the pending migrations")
        if stale:
            marked = store.scalar("SELECT count(*) FROM collection_runs WHERE status = 'interrupted' AND run_id IN "
                                  f"({', '.join('?' * len(stale))})", stale)
            done.append(f"marked {marked} stale runs interrupted (their rows are kept)")
        if "temporary" in by_name:
            import shutil

            from pmdb.store_check import orphans

            found = orphans(store)
            for entry in found:
                if entry.is_dir():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
            done.append(f"removed {len(found)} entries of artifacts/tmp left by runs that ended")
        if {"registry", "unmirrored", "champions", "files"} & set(by_name):
            from fitters.registry_mirror import repair

            done += repair(store, ws)
    return done


def doctor(ctx: typer.Context,
           repair: bool = typer.Option(False, "--repair", help="Fix what can be fixed without losing anything: "
                                       "apply pending migrations, mark stale runs interrupted, remove the "
                                       "temporary files of runs that ended, re-register "
                                       "versions the MLflow registry lost (or mark them lost), align champions.")
           ) -> None:
    """Check the workspace: one line per check (ok or problem, and the command that fixes it); exit 0 when all
    are ok, 1 otherwise. Nothing is written unless --repair; measurement rows are never deleted."""
    checks, stale = _checks(ctx)
    if repair and any(c.repairable for c in checks):
        for line in _repair(ctx, checks, stale):
            typer.echo(textwrap.fill(line, WIDTH, initial_indent="repaired: ", subsequent_indent=" " * 10,
                                     break_on_hyphens=False))
        checks, stale = _checks(ctx)
    for check in checks:
        typer.echo(_line(check))
        if not check.ok and check.fix:
            typer.echo(f"{'':8}fix: {check.fix}")
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(doctor)
