"""``pmdb fit cross-gpu --target NAME [--op OP ...] [--source GPU ...]``: kernel models for a GPU known only by its spec
sheet, learned from the GPUs that have kernel tables (:mod:`fitters.cross_gpu`)."""
from __future__ import annotations

from typing import List, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store, render, workspace
from pmdb.errors import PmdbError
from pmdb.notes import say, wrapped


def cross_gpu(ctx: typer.Context,
              target: str = typer.Option(..., "--target", help="Platform to register versions for: a GPU with a "
                                         "spec sheet (`pmdb platform-specs FILE --name NAME`), e.g. l4."),
              op: Optional[List[str]] = typer.Option(None, "--op", help="Op to fit (repeatable; default: every op "
                                                     "with tables on two or more source GPUs)."),
              source: Optional[List[str]] = typer.Option(None, "--source", help="GPU platform to learn from "
                                                         "(repeatable; default: every GPU with a spec sheet and "
                                                         "device timings, except the target)."),
              max_rows: Optional[int] = typer.Option(None, "--max-rows", min=10, help="Use at most this many rows "
                                                     "per source GPU and op (a seeded sample; default: all)."),
              logo: bool = typer.Option(True, "--logo/--no-logo", help="Score a target without tables of its own by "
                                        "leave-one-GPU-out over the sources (one more fit per source and op)."),
              seed: int = typer.Option(0, "--seed", help="Seed of the sample and the boosted trees."),
              promote: bool = typer.Option(False, "--promote", help="Make this fit's versions the champions, also "
                                           "where a name has one (an earlier fit's, or the target's own)."),
              lanes: bool = typer.Option(True, "--lane-correction/--no-lane-correction", help="Price the GEMMs of a "
                                         "target with wider SMs than its sources' by what such SMs were measured to "
                                         "take (pmdb/samples/lane_attainment; x1.30 at 128 FP32 lanes per SM)."),
              progress: bool = typer.Option(True, "--progress/--no-progress", help="Print what is being fitted.")
              ) -> None:
    """Register cross-GPU kernel models on a GPU known only by its spec sheet (see HELP)."""
    from fitters.cross_gpu import CrossGpuOptions, fit_for_target

    if op is not None and not all(o.strip() for o in op):
        raise PmdbError("--op needs an op name")
    report = (lambda message: typer.echo(f"cross-gpu: {message}", err=True)) if progress else None
    options = CrossGpuOptions(target=target, ops=list(op) if op else None, sources=list(source) if source else None,
                              seed=seed, max_rows_per_gpu=max_rows, logo=logo, progress=report,
                              promote=promote, lanes=lanes)
    with open_store(ctx) as store:
        platforms.load(store, target, hint=f"register one with `pmdb platform-specs FILE --name {target}`")
        results, notes = fit_for_target(store, workspace(ctx), options)
    for note in notes:
        say("note", note)
    shown = results.assign(gmae_pct=(100 * results["gmae"].astype(float)).round(2))
    shown["champion"] = shown["champion"].map({True: "*", False: ""})
    render(shown[["name", "version", "family", "test", "gmae_pct", "n_train", "n_test", "seconds", "champion"]]
           .rename(columns={"gmae_pct": "gmae_%"}))
    typer.echo(f"{len(results)} model versions registered on {target}, learned from "
               f"{', '.join(results.attrs.get('sources', []))}")
    spreads = results.attrs.get("logo_ratio_spread") or {}
    if spreads:
        typer.echo(wrapped("measured over predicted kernel time on each source GPU left out: "
                           + ", ".join(f"{o} {lo:.2f}-{hi:.2f}" for o, (lo, hi) in spreads.items())
                           + f"; `pmdb predict --target-platform {target}` prints the range this puts the step in"))


HELP = ("Fit cross-GPU kernel models (utilisation under the wave roofline, after NeuSight) on the GPUs with kernel "
        "tables and register them on a GPU known only by its spec sheet (or on one with tables, whose own rows then "
        "test them).\n\n"
        "One version per op (family cross_gpu, bound to the target's specs), plus backward versions of "
        "fully_connected and bmm (family gemm_shapes: the backward GEMMs priced by the forward model). Test metrics: "
        "the target's own rows when it has tables, else the mean leave-one-GPU-out error over the sources. "
        "`champion` is set where the model name has none (a target's own `pmdb fit` champions and an earlier fit's "
        "are kept; --promote replaces them).\n\n"
        "Example: pmdb platform-specs NVIDIA_L4.json --name l4, then pmdb fit cross-gpu --target l4")


def register(app: typer.Typer) -> None:
    app.command("cross-gpu", help=HELP)(cross_gpu)
