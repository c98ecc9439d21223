"""``pmdb platform-specs``: register GPUs that are not this machine from spec sheets (device-config JSON) or from a
Kineto trace's deviceProperties; list platforms with their specs."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError


def platform_specs(ctx: typer.Context,
                   files: Optional[List[Path]] = typer.Argument(
                       None, help="Device-config JSON files (SingleFLOPs GFLOP/s, Mem_Bw GB/s, Num_Sm, Core_Per_SM, "
                                  "Freq MHz, L2Cache MB, Dev_Mem GB), or traces with --from-trace."),
                   name: Optional[str] = typer.Option(None, "--name", "--platform",
                                                      help="Platform name (one file only; default: the device "
                                                           "name as a slug, e.g. tesla-v100-pcie-32gb)."),
                   from_trace: bool = typer.Option(False, "--from-trace",
                                                   help="The files are Kineto traces: take the GPU's name, SMs and "
                                                        "memory from deviceProperties (no FLOP/s or bandwidth)."),
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
    if name and len(files) > 1:
        raise PmdbError("--name names one platform: give one file with it")
    read = gpu_specs.sheet_from_trace if from_trace else gpu_specs.read_sheet
    sheets = [(path, *read(path)) for path in files]  # every file is checked before anything is stored
    source = "trace-device-properties" if from_trace else "spec-sheet"
    with open_store(ctx) as store:
        for path, sheet, details, digest in sheets:
            registered = gpu_specs.register(store, sheet, name, source=source, source_file=str(path),
                                            sha256=digest, details=details)
            typer.echo(f"platform {registered}: {sheet.device}")
        render(gpu_specs.listing(store))


def register(app: typer.Typer) -> None:
    app.command("platform-specs")(platform_specs)
