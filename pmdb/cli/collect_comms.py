"""``pmdb collect comms`` (measure collectives with torch.distributed) and ``pmdb collect import-comms``
(load PARAM / nccl-tests results recorded elsewhere)."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import List, Optional

import typer

from collectors.comms.sizes import COLLECTIVES, parse_bytes
from pmdb import platform as platforms
from pmdb.cli.common import PlatformOption, open_store, render
from pmdb.errors import PmdbError

# torch and the importers load when a command runs, not whenever the CLI starts.
_FORMATS = {"param": "collectors.importers.param", "nccl-tests": "collectors.importers.nccl_tests"}


def comms(ctx: typer.Context,
          world_size: Optional[int] = typer.Option(
              None, "--world-size", help="Ranks to launch on this host (default 2; under torchrun: WORLD_SIZE)."),
          ops: str = typer.Option(",".join(COLLECTIVES), "--ops",
                                  help=f"Comma-separated collectives to measure ({', '.join(COLLECTIVES)})."),
          min_bytes: str = typer.Option("4", "--min-bytes",
                                        help="Smallest message size (bytes; K/M/G suffixes are powers of 1024)."),
          max_bytes: str = typer.Option("64MiB", "--max-bytes", help="Largest message size (e.g. 64MiB)."),
          factor: int = typer.Option(2, "--factor", help="Multiply the size by this between steps (integer >= 2)."),
          iters: int = typer.Option(20, "--iters", help="Timed iterations per size (each after a barrier)."),
          warmup: int = typer.Option(5, "--warmup", help="Untimed calls per size before timing (>= 1)."),
          random_splits: int = typer.Option(2, "--random-splits",
                                            help="Random per-rank split draws per size for all_to_allv."),
          seed: int = typer.Option(0, "--seed", help="Seed of the all_to_allv random splits."),
          threads: int = typer.Option(1, "--threads", help="torch intra-op threads per rank (recorded)."),
          platform: Optional[str] = PlatformOption,
          progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar over sizes."),
          ) -> None:
    """Sweep collectives over doubling message sizes with torch.distributed (gloo on CPU, nccl on CUDA).

    Launches the ranks itself, or joins a torchrun job (RANK/WORLD_SIZE/MASTER_ADDR set; only rank 0 writes).
    """
    from collectors.comms.config import SweepConfig, is_oversubscribed, torchrun_env, usable_cores

    env = torchrun_env()
    if env is not None and world_size is not None and world_size != env.world_size:
        raise PmdbError(f"--world-size {world_size} contradicts the launcher's WORLD_SIZE={env.world_size}")
    config = SweepConfig(world_size=env.world_size if env else (world_size or 2),
                         collectives=tuple(o.strip() for o in ops.split(",") if o.strip()),
                         min_bytes=parse_bytes(min_bytes), max_bytes=parse_bytes(max_bytes), factor=factor,
                         iters=iters, warmup=warmup, random_splits=random_splits, seed=seed, threads=threads)
    steps = config.plan()  # user mistakes are refused here, before torch loads
    from collectors.comms import sweep_ranks
    from collectors.comms.sweep import curve_table, follow, run_sweep

    if env is not None and env.rank != 0:
        follow(config, env)
        typer.echo(f"rank {env.rank}: measured {len(steps)} steps (rank 0 stores them)")
        return
    _, device_kind = sweep_ranks.backend_for_device()
    with open_store(ctx) as store:
        name = platforms.resolve(store, platform)  # an unknown --platform is refused before any warning or run
        if is_oversubscribed(config, device_kind, env):
            ranks_here = env.local_world_size if env else config.world_size
            typer.echo(f"warning: {ranks_here} ranks x {threads} threads on {usable_cores()} cores is "
                       f"oversubscribed: latencies will be erratic (recorded with the run)", err=True)
        outcome = run_sweep(store, config, name, progress=progress, env=env)
    summary = outcome.summary
    typer.echo(f"run {outcome.run_id}: {outcome.steps} steps, {summary['rows']} rows on {name} in "
               f"{outcome.wall_s:.1f} s (world size {config.world_size}, {summary['backend']}, "
               f"{config.threads} thread(s) per rank{', oversubscribed' if outcome.oversubscribed else ''})")
    typer.echo("latency p50 (us) and bus bandwidth (GB/s) per message size:")
    render(curve_table(outcome.rows))


def import_comms(ctx: typer.Context,
                 files: List[Path] = typer.Argument(..., help="Result files to import (all or none are imported)."),
                 fmt: str = typer.Option(..., "--format", help="param (PARAM comms.py stdout) or nccl-tests "
                                                               "(its stdout or CSV form)."),
                 platform: str = typer.Option(..., "--platform", help="Name of the machine the files come from "
                                                                      "(created as an imported platform)."),
                 topology: Optional[str] = typer.Option(None, "--topology",
                                                        help="Free text describing the interconnect/topology."),
                 world_size: Optional[int] = typer.Option(
                     None, "--world-size", help="Ranks of the measurement, when the files do not say "
                                                "(checked against their busbw/algbw ratio)."),
                 collective: Optional[str] = typer.Option(
                     None, "--collective", help=f"Collective measured, when the files do not say "
                                                f"({', '.join(COLLECTIVES)})."),
                 device_kind: str = typer.Option("cuda", "--device-kind",
                                                 help="cuda or cpu: the kind of the named platform if new."),
                 ) -> None:
    """Import collective results recorded elsewhere (atomic; a file already imported is skipped)."""
    from collectors.importers.common import ImportHints, import_files

    if fmt not in _FORMATS:
        raise PmdbError(f"bad --format {fmt!r}: use {' or '.join(_FORMATS)}")
    hints = ImportHints(world_size=world_size, collective=collective)
    parser = importlib.import_module(_FORMATS[fmt]).parse
    with open_store(ctx) as store:
        report = import_files(store, list(files), fmt, parser, platform=platform, topology=topology,
                              hints=hints, device_kind=device_kind)
    for path, rows, collectives, n in report.imported:
        typer.echo(f"imported {path}: {rows} rows ({collectives}, world size {n})")
    for path, reason in report.skipped:
        typer.echo(f"skipped {path}: {reason}")
    if report.run_id:
        typer.echo(f"run {report.run_id} on platform {platform}")


def register(app: typer.Typer) -> None:
    app.command("comms")(comms)
    app.command("import-comms")(import_comms)
