"""``pmdb fit overheads``: extract CPU overheads T1-T5 from a platform's stored traces as a new version."""
from __future__ import annotations

from typing import Optional

import typer

from fitters.overheads import fit_overheads, log_overhead_version, require_traces
from pmdb import platform as platforms
from pmdb.cli.common import PlatformOption, open_store, render


def overheads(ctx: typer.Context,
              platform: Optional[str] = PlatformOption,
              include_joint: bool = typer.Option(False, "--include-joint", help="Also use Kineto traces recorded "
                                                 "together with an execution trace whose set has no unprofiled "
                                                 "time (--measured-ms): their host times are inflated, raw.")
              ) -> None:
    """Recompute the overhead table (T1-T5 per op, IQR-filtered) of a platform from all its Kineto traces; the new
    version is also logged as an MLflow run (experiment pmdb-overheads)."""
    with open_store(ctx) as store:
        name = platforms.resolve(store, platform)
        require_traces(store, name, include_joint)  # a platform without traces is refused before a run row
        with store.run("overheads", name, {"include_joint": include_joint}) as run:
            run.summary = fit_overheads(store, run.run_id, name, include_joint=include_joint)
        version = run.summary["overhead_version"]
        mlflow_run = log_overhead_version(store, version)  # after the run completed: a failure keeps the version
        table = store.query(
            "SELECT kind, count(*) AS ops, sum(count) AS samples_kept, round(median(mean_us), 2) AS median_mean_us "
            "FROM overheads WHERE overhead_version = ? GROUP BY kind ORDER BY kind", [version])
    s = run.summary
    typer.echo(f"overhead version {version} of {name} ({s['semantics']}): {s['samples']} samples from "
               f"{s['traces']} trace(s), {s['kept']} kept after IQR filtering, {s['ops']} op names")
    render(table)
    for scaled in s.get("host_scale", []):
        if scaled["scale"] < 1.0:
            typer.echo(f"trace {scaled['trace_id']}: host path scaled by {scaled['scale']:.3f} (profiled iteration "
                       f"{scaled['profiled_us'] / 1e3:.1f} ms, unprofiled {scaled['unprofiled_us'] / 1e3:.1f} ms, "
                       f"device busy {100 * scaled['device_busy']:.0f}%)")
    typer.echo(f"logged to MLflow (experiment pmdb-overheads): run {mlflow_run}")


def register(app: typer.Typer) -> None:
    app.command("overheads")(overheads)
