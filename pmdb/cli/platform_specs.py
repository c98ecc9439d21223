"""``pmdb platform-specs``: register GPUs that are not this machine from spec sheets (device-config JSON) or from a
Kineto trace's deviceProperties; list platforms with their specs."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError
from pmdb.userfiles import expand_files


def _expand(files: List[Path], from_trace: bool) -> list[Path]:
    """Files as given; a directory stands for its *.json (sheets) or *.json / *.json.gz (traces) files."""
    suffixes = (".json", ".json.gz") if from_trace else (".json",)
    return expand_files(files, suffixes, f"{'trace' if from_trace else 'spec-sheet'} JSON files")


def platform_specs(ctx: typer.Context,
                   files: Optional[List[Path]] = typer.Argument(
                       None, metavar="FILES",
                       help="Device-config JSON files (Device; SingleFLOPs GFLOP/s and Mem_Bw GB/s required; "
                            "Num_Sm, Core_Per_SM, Freq MHz, L2Cache MB, Dev_Mem GB optional) or, with "
                            "--from-trace, Kineto traces (.json or .json.gz). A directory stands for its "
                            "JSON files. All are checked before anything is stored."),
                   name: Optional[str] = typer.Option(None, "--name", "--platform",
                                                      help="Platform name (one file only; default: the device "
                                                           "name as a slug, e.g. tesla-v100-pcie-32gb)."),
                   from_trace: bool = typer.Option(False, "--from-trace",
                                                   help="The files are Kineto traces: take the GPU's name, SM count "
                                                        "and memory (bytes) from deviceProperties; no FLOP/s or "
                                                        "bandwidth, and a registered sheet's figures are kept."),
                   list_: bool = typer.Option(False, "--list", help="List platforms with their specs and exit.")
                   ) -> None:
    """Register GPU platforms (device kind cuda, semantics async_device) from their spec sheets."""
    from collectors import gpu_specs

    if list_:
        with open_store(ctx, read_only=True) as store:
            render(gpu_specs.listing(store))
        return
    if not files:
        raise PmdbError("give spec-sheet files (or --list); see `pmdb platform-specs --help`")
    if name is not None:
        platforms.check_name(name)
    paths = _expand(files, from_trace)
    if name and len(paths) > 1:
        raise PmdbError(f"--name names one platform: give one file with it ({len(paths)} given)")
    read = gpu_specs.sheet_from_trace if from_trace else gpu_specs.read_sheet
    source = "trace-device-properties" if from_trace else "spec-sheet"
    items = []
    for path in paths:  # every file is read and checked before anything is stored
        sheet, details, digest = read(path)
        items.append(gpu_specs.SheetSource(sheet, name, source, str(path), digest, details))
    with open_store(ctx) as store:
        names = gpu_specs.register_all(store, items)
        for registered, item in zip(names, items):
            typer.echo(f"platform {registered}: {item.sheet.device} ({source} {item.source_file})")
        render(gpu_specs.listing(store))


def register(app: typer.Typer) -> None:
    app.command("platform-specs")(platform_specs)
