"""``pmdb fit overheads``: extract CPU overheads T1-T5 from a platform's stored traces as a new version."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

import typer

from fitters.host_pace import read_pace
from fitters.overheads import fit_overheads, log_overhead_version, require_traces
from pmdb import platform as platforms
from pmdb.cli.common import PlatformOption, open_store, render


def overheads(ctx: typer.Context,
              platform: Optional[str] = PlatformOption,
              include_joint: bool = typer.Option(False, "--include-joint", help="Also use Kineto traces recorded "
                                                 "together with an execution trace whose set has no unprofiled "
                                                 "time (--measured-ms): their host times are inflated, raw."),
              host_pace: Optional[Path] = typer.Option(None, "--host-pace", metavar="CSV", help="Back-to-back op "
                                                       "timings (op, shape, back_to_back_us; µs) measured without a "
                                                       "profiler on the host that recorded the traces: the "
                                                       "profiler's slowing of the host is calibrated on their "
                                                       "host-bound rows instead of the unprofiled/profiled step.")
              ) -> None:
    """Recompute the overhead table (T1-T5 per op, IQR-filtered) of a platform from all its Kineto traces; the new
    version is also logged as an MLflow run (experiment pmdb-overheads)."""
    with open_store(ctx) as store:
        name = platforms.resolve(store, platform)
        require_traces(store, name, include_joint)  # a platform without traces is refused before a run row
        if host_pace is not None:
            read_pace(host_pace)                    # so is an unreadable timing file
        params = {"include_joint": include_joint, **({"host_pace": str(host_pace)} if host_pace else {})}
        with store.run("overheads", name, params) as run:
            run.summary = fit_overheads(store, run.run_id, name, include_joint=include_joint, host_pace=host_pace)
        version = run.summary["overhead_version"]
        mlflow_run = log_overhead_version(store, version)  # after the run completed: a failure keeps the version
        table = store.query(
            "SELECT kind, count(*) AS ops, sum(count) AS samples_kept, round(median(mean_us), 2) AS median_mean_us "
            "FROM overheads WHERE overhead_version = ? GROUP BY kind ORDER BY kind", [version])
    s = run.summary
    _echo(f"overhead version {version} of {name} ({s['semantics']}): {s['samples']} samples from "
          f"{s['traces']} trace(s), {s['kept']} kept after IQR filtering, {s['ops']} op names")
    render(table)
    for scaled in s.get("host_scale", []):
        if scaled["scale"] < 1.0 or scaled.get("calibration"):
                _echo(_scaled_line(scaled))
    _echo(f"logged to MLflow (experiment pmdb-overheads): run {mlflow_run}")


def _echo(text: str) -> None:
    """One message, wrapped to 80 columns."""
    typer.echo(textwrap.fill(text, width=79, subsequent_indent="  ", break_long_words=False))


def _scaled_line(scaled: dict) -> str:
    """How one trace's host path was scaled (fitters.overheads.HostScale as a dict)."""
    head = f"trace {scaled['trace_id']}: host path "
    if scaled["method"] == "back-to-back calibration":
        low, high = scaled["calibration"]["ratio_range"]
        return (f"{head}scaled by {scaled['scale']:.3f} (back-to-back calibration, {scaled['calibration']['source']}: "
                f"median of {len(scaled['calibration']['ops'])} op names, {low:.3f}-{high:.3f}; the step's ratio "
                f"{scaled['step_scale'] or 1:.3f})")
    text = f"{head}not scaled" if scaled["scale"] >= 1.0 else (
        f"{head}scaled by {scaled['scale']:.3f} (profiled iteration {scaled['profiled_us'] / 1e3:.1f} ms, "
        f"unprofiled {scaled['unprofiled_us'] / 1e3:.1f} ms, device busy {100 * scaled['device_busy']:.0f}%)")
    return text + (f"; {scaled['why']}" if scaled.get("calibration") else "")


def register(app: typer.Typer) -> None:
    app.command("overheads")(overheads)
