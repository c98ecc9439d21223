"""``pmdb collect relaunch``: more launches of stored workload runs, added to their ground truth."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import typer

from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError


def relaunch(
    ctx: typer.Context,
    runs: list[str] = typer.Argument(..., help="Workload run ids (or their first 12 characters, as `pmdb runs "
                                               "--kind workload` shows them)."),
    launches: int = typer.Option(1, "--launches", help="Launches of fresh rank processes to add to each run."),
    min_launches: Optional[int] = typer.Option(None, "--min-launches", help="Skip a run that already has this many "
                                               "launches whose medians lie within 3% of each other."),
    timeout: Optional[float] = typer.Option(None, help="Fail a relaunch if its ranks take longer (seconds)."),
) -> None:
    """Launch stored workload runs again with their own options and add the launches to their ground truth (the
    median of all launch medians): taken between the rounds of `collect ops --from-traces`, ground truth and prices
    sample the same minutes of the host."""
    from collectors.workloads.collect import start_ranks
    from collectors.workloads.relaunch import relaunch as add_launches

    if launches < 1:
        raise PmdbError("--launches must be >= 1")
    if min_launches is not None and min_launches < 1:
        raise PmdbError("--min-launches must be >= 1")
    rows = []
    with open_store(ctx) as store:
        ids = [store.resolve_run_id(text) for text in runs]
        start_ranks()   # the ranks' imports run while the first run's options are checked
        for run_id in ids:
            summary = add_launches(store, run_id, launches, min_launches, timeout_s=timeout)
            after = ("settled" if summary["settled"] else
                     f"{summary['measured_us_before'] / 1e3:.3f} -> {summary['measured_us'] / 1e3:.3f} ms")
            typer.echo(f"{summary['name']} ({run_id[:12]}): {len(summary['launch_medians_us'])} launches, {after}",
                       err=True)
            rows.append((run_id[:12], summary["name"], len(summary["launch_medians_us"]),
                         round(summary["measured_us_before"] / 1e3, 3), round(summary["measured_us"] / 1e3, 3),
                         "settled" if summary["settled"] else "added"))
    render(pd.DataFrame(rows, columns=["run", "workload", "launches", "before_ms", "after_ms", "status"]))


def register(app: typer.Typer) -> None:
    app.command("relaunch")(relaunch)
