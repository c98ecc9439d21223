"""``pmdb export`` (completed runs as Parquet files with a manifest) and ``pmdb merge`` (an export, or another
workspace, into this store)."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import List

import typer

from pmdb.cli.common import open_store


def _counts(rows: dict[str, int], sign: str = "") -> list[str]:
    return [f"{table} {sign}{count:,}" for table, count in rows.items() if count]


def _echo_items(head: str, items: list[str], tail: str = "") -> None:
    """``head`` then the comma-separated ``items`` and ``tail``, wrapped at 80 columns between items."""
    lines, line = [], head
    parts = [f"{item}," for item in items[:-1]] + [f"{items[-1]}{tail}" if items else tail.lstrip("; ")]
    for part in parts:
        if line.strip() and len(line) + 1 + len(part) > 80:
            lines.append(line)
            line = "  " + part
        else:
            line = f"{line} {part}" if line.strip() else "  " + part
    typer.echo("\n".join(lines + [line]))


def _echo_wrapped(text: str) -> None:
    typer.echo("\n".join(textwrap.wrap(text, 80, subsequent_indent="  ", break_long_words=False,
                                       break_on_hyphens=False)))


def export(ctx: typer.Context,
           directory: Path = typer.Argument(..., help="New directory to write (must not exist, or be empty)."),
           platform: List[str] = typer.Option([], "--platform", help="Only runs on this platform (repeatable)."),
           run: List[str] = typer.Option([], "--run", help="Only this run id, or its first 6+ characters "
                                                         "(repeatable; see `pmdb runs`)."),
           ) -> None:
    """Write completed runs, every row they need and their trace files as Parquet files with a manifest.json
    (schema version, runs, sha256 per file). MLflow model versions are not exported."""
    from pmdb.exchange import export as export_runs

    with open_store(ctx, read_only=True) as store:
        done = export_runs(store, directory, platforms=platform, runs=[store.resolve_run_id(r) for r in run])
    extra = f" (+{len(done.dependencies)} they depend on)" if done.dependencies else ""
    _echo_wrapped(f"exported {len(done.runs)} runs{extra} on {', '.join(done.platforms)} to {done.directory}")
    _echo_items("rows:", _counts(done.rows), f"; {done.trace_files} trace files, {done.bytes / 1e6:.1f} MB")


def merge(ctx: typer.Context,
          source: Path = typer.Argument(..., help="An export directory (`pmdb export`) or another workspace."),
          ) -> None:
    """Add the runs of an export or of another workspace to this store, in one transaction. Runs already here are
    skipped (merging twice adds nothing); a run id here with other content refuses the merge."""
    from pmdb.exchange import merge as merge_runs

    with open_store(ctx) as store:
        done = merge_runs(store, source)
    rows = {t: n for t, n in done.rows.items() if t != "collection_runs"}
    here = f" ({len(done.present)} already here)" if done.present else ""
    files = f"; {done.trace_files} trace files" if done.trace_files else ""
    _echo_items(f"merged {len(done.added)} runs{here}:", _counts(rows, "+") or ["nothing added"], files)
    for run_id, reason in done.skipped.items():
        _echo_wrapped(f"skipped run {run_id}: {reason}")
    for note in done.notes:
        _echo_wrapped(note)


def register(app: typer.Typer) -> None:
    app.command("export")(export)
    app.command("merge")(merge)
