"""``pmdb report``: the paper's figures and tables as PNGs and one offline HTML page, drawn from SQL over the store."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import typer

from pmdb.cli.common import open_store, render, workspace
from pmdb.errors import PmdbError
from pmdb.notes import wrapped


def report(ctx: typer.Context,
           platform: Optional[str] = typer.Option(None, "--platform", help="Only this platform's models, "
                                                  "measurements and studies (default: every platform)."),
           output: Optional[Path] = typer.Option(None, "--output", "-o", help="Folder to write index.html and the "
                                                 "PNG figures into (default: <workspace>/reports).")) -> None:
    """Write kernel-model held-out errors, collective curves with their errors (Fig. 9), predicted vs measured vs
    baseline with the measured spread (Fig. 10/11), per-rank stream breakdowns (Fig. 2), the sharding table (Table
    IV) and planner sweeps as an HTML page that opens offline; sections without data say what is missing."""
    from report.build import build_report

    out = output or workspace(ctx).reports_dir
    with open_store(ctx, read_only=True) as store:
        if platform is not None and not store.scalar("SELECT count(*) FROM platforms WHERE name = ?", [platform]):
            raise PmdbError(f"unknown platform {platform!r} (`pmdb status` lists them)")
        made = build_report(store, out, platform)
    from report.page import not_run_yet

    rows = [{"section": s.key, "figures": len(s.figures), "warnings": len(s.warnings),
             "state": "not run yet" if s.missing else "shown"} for s in made.sections]
    render(pd.DataFrame(rows))
    said = [f"{s.key}: warning: {w}" for s in made.sections for w in s.warnings]
    said += [f"{s.key}: {not_run_yet(s.missing)}" for s in made.sections if s.missing]
    if said:  # whole, wrapped to the terminal: the commands they advise are never cut
        typer.echo("\n" + "\n".join(wrapped(line) for line in said))
    typer.echo("\n" + wrapped(f"wrote {made.page} and {len(made.figures)} figure(s)"))


def register(app: typer.Typer) -> None:
    app.command("report")(report)
