"""``pmdb collect mine-traces``: the GPU kernels of stored traces as kernel measurements (op_measurements rows,
source 'trace', cache state 'device') of the trace set's platform; atomic and idempotent."""
from __future__ import annotations

from typing import List

import typer

from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError


def mine_traces(ctx: typer.Context,
                trace_set: List[int] = typer.Option([], "--trace-set", help="Trace set to mine (repeatable); see "
                                                    "`pmdb sql \"SELECT * FROM v_trace_sets\"`."),
                all_sets: bool = typer.Option(False, "--all", help="Mine every completed trace set of a cuda "
                                              "platform that holds GPU kernels.")) -> None:
    """Turn every GPU kernel of stored Kineto + execution traces into a kernel measurement of its op (one row per
    traced op instance: shapes from the trace, time = the op's summed kernel time), so `pmdb fit --platform GPU`
    works from traces alone. Ops mined before are not mined again."""
    from collectors.traces.kernel_rows import mine_traces as mine, summary_frame

    if bool(trace_set) == all_sets:
        raise PmdbError("give --trace-set ID (repeatable) or --all")
    with open_store(ctx) as store:
        report = mine(store, list(trace_set) or None)
    for mining in report.sets:
        share = mining.mined_us / mining.device_us if mining.device_us else 0.0
        typer.echo(f"trace set {mining.trace_set_id} on {mining.platform}: {len(mining.new)} new rows "
                   f"({len(mining.rows)} mineable ops; {mining.mined_events} of {mining.events} GPU events, "
                   f"{share:.0%} of their device time)")
        for reason, count in mining.skipped.most_common(5):
            typer.echo(f"  not mined: {count} events, {mining.skipped_us[reason]:.0f} µs: {reason}")
    for platform, run_id in report.runs.items():
        typer.echo(f"run {run_id}: rows on platform {platform}")
    if not report.runs:
        typer.echo("nothing new: every mineable op of these trace sets is in the store already")
    render(summary_frame(report))


def register(app: typer.Typer) -> None:
    app.command("mine-traces")(mine_traces)
