"""``pmdb fit comms-context``: the collectives' in-context term, fitted on the collectives of the platform's stored
multi-rank traces against the plain microbenchmark curves (:mod:`fitters.collective_context`)."""
from __future__ import annotations

from typing import List, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import PlatformOption, open_store, render, workspace
from pmdb.errors import PmdbError


def comms_context(ctx: typer.Context,
                  collective: Optional[List[str]] = typer.Option(None, "--collective", help="Collective to fit "
                                                                 "(repeatable; default: every traced one)."),
                  trace_set: Optional[List[int]] = typer.Option(None, "--trace-set", help="Trace set to learn from "
                                                                "(repeatable; default: every recorded multi-rank "
                                                                "set of the platform)."),
                  platform: Optional[str] = PlatformOption,
                  seed: int = typer.Option(0, "--seed", help="Seed of the split of the trace sets."),
                  subtract_compute: bool = typer.Option(False, "--subtract-compute", help="Take the rank's own "
                                                        "compute out of a collective's traced work where the "
                                                        "ranks' communication threads share their cores (off: "
                                                        "the traced work as it is)."),
                  target: str = typer.Option("call", "--target", metavar="call|step",
                                             help="call: fit each collective call of the traces (factor, size "
                                                  "slope, stall); step: one factor per world size on every "
                                                  "collective, solved so that the given runs' simulated steps "
                                                  "match their measured medians (needs --trace-set).")) -> None:
    """Fit how much slower collectives run inside training steps than their microbenchmark curve (see HELP)."""
    from fitters.collective_context import ContextOptions, fit_in_context
    from simulator.threads import comm_shares_core

    if collective is not None and not all(c.strip() for c in collective):
        raise PmdbError("--collective needs a collective name, e.g. all_reduce")
    if target not in ("call", "step"):
        raise PmdbError(f"bad --target {target!r}: use call or step")
    if target == "step":
        if collective or subtract_compute:
            raise PmdbError("--target step prices every collective with one factor on the plain curves: "
                            "--collective and --subtract-compute belong to --target call")
        _step(ctx, list(trace_set or []), platform, seed)
        return
    options = ContextOptions(list(collective) if collective else None, list(trace_set) if trace_set else None, seed,
                             subtract_compute)
    with open_store(ctx) as store:
        record = platforms.load(store, platforms.resolve(store, platform))
        results, notes = fit_in_context(store, workspace(ctx), record.name,
                                        lambda world, threads: comm_shares_core(record, world, threads), options)
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    shown = results.assign(**{f"{m}_%": (100 * results[f"{m}_gmae"]).round(1)
                              for m in ("test", "plain", "replicate")})
    shown["factor"] = shown["factor"].round(3)
    shown["slope"] = shown["slope"].round(3)
    shown["stall_us"] = shown["stall_us"].round(0)
    render(shown[["collective", "world_size", "version", "factor", "slope", "stall_us", "n_train", "n_test",
                  "test_%", "plain_%", "replicate_%"]].rename(columns={"world_size": "ws", "replicate_%": "noise_%"}))
    typer.echo(f"{len(results)} in-context versions registered on {record.name}, each its name's champion;\n"
               f"`pmdb predict` prices collectives with them (`--collectives plain`: without)")


def _step(ctx: typer.Context, trace_sets: list[int], platform: str | None, seed: int) -> None:
    from simulator.step_calibration import calibrate

    with open_store(ctx) as store:
        record = platforms.load(store, platforms.resolve(store, platform))
        results, notes = calibrate(store, workspace(ctx), record.name, trace_sets, seed)
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    if results.empty:
        raise PmdbError("nothing calibrated: " + "; ".join(notes))
    shown = results.assign(**{f"{m}_%": (100 * results[f"{m}_gmae"]).round(1) for m in ("test", "plain", "train")})
    shown["factor"] = shown["factor"].round(3)
    render(shown[["collective", "world_size", "version", "factor", "n_train", "n_test", "train_%", "test_%",
                  "plain_%"]].rename(columns={"world_size": "ws"}))
    typer.echo(f"{len(results)} in-context versions registered on {record.name} (step-calibrated: n_ counts runs, "
               f"errors are of whole steps), each its name's champion")


HELP = ("Fit the collectives' in-context term: per collective and world size, the factor by which the collectives "
        "of the platform's stored multi-rank traces (min over ranks of their work on the communication stream; "
        "--subtract-compute: without the rank's own compute where the communication thread shares its core) "
        "exceed the plain microbenchmark curve's champion, as a function of message size, plus the expected stall per call "
        "(stall_us: the mean spread of the ranks' work end times on a collective, a delay the min over ranks "
        "leaves out).\n\n"
        "Held out by trace set: test_% is the version's GMAE on the test sets, plain_% the plain curve's on the "
        "same rows, noise_% the spread of the traced instances themselves (noise floor). Each version "
        "(<collective>.ws<N>.in_context~<platform>) becomes champion; predictions use it unless given "
        "--collectives plain.\n\n"
        "--target step calibrates on whole steps instead: one factor per world size, solved on the given runs' "
        "measured medians (robust where single calls are bimodal, as gloo's on a host whose ranks share the "
        "cores).\n\n"
        "Learn from runs you will not judge the predictions on (--trace-set): a prediction priced with a "
        "version trained on its own trace set is in-sample, and `pmdb errors` and the summary leave it out.\n\n"
        "Example: pmdb collect workload dlrm --world-size 2, pmdb fit --all, then pmdb fit comms-context")


def register(app: typer.Typer) -> None:
    app.command("comms-context", help=HELP)(comms_context)
