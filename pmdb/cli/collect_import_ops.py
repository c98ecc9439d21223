"""``pmdb collect import-ops``: kernel measurements recorded elsewhere (NeuSight tables, or the generic CSV/Parquet
format) into ``op_measurements`` of a named platform; atomic and idempotent by file checksum."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import List

import typer

from pmdb.cli.common import open_store
from pmdb.errors import PmdbError

_FORMATS = {"neusight": "collectors.importers.neusight", "generic": "collectors.importers.generic_ops"}


def import_ops(ctx: typer.Context,
               files: List[Path] = typer.Argument(..., help="Files to import (a directory stands for its .csv, "
                                                            ".csv.gz and .parquet files); all or none are imported."),
               fmt: str = typer.Option(..., "--format", help="neusight (NeuSight <GPU>/<op>.csv.gz tables) or "
                                                             "generic (op, pass, parameter columns, time_us|time_ms|"
                                                             "..., device; CSV or Parquet; see the README)."),
               platform: str = typer.Option(..., "--platform", help="Name of the GPU the files were measured on "
                                                                    "(created as an imported platform if new)."),
               device_kind: str = typer.Option("cuda", "--device-kind",
                                               help="cuda or cpu: the kind of the named platform if new.")) -> None:
    """Import kernel measurements recorded elsewhere (atomic; a file already imported is skipped)."""
    from collectors.importers.ops_common import import_op_files

    if fmt not in _FORMATS:
        raise PmdbError(f"bad --format {fmt!r}: use {' or '.join(_FORMATS)}")
    parser = importlib.import_module(_FORMATS[fmt]).parse
    with open_store(ctx) as store:
        report = import_op_files(store, list(files), fmt, parser, platform=platform, device_kind=device_kind)
    for path, rows, ops in report.imported:
        typer.echo(f"imported {path}: {rows} rows ({ops})")
    for path, reason in report.skipped:
        typer.echo(f"skipped {path}: {reason}")
    if report.run_id:
        total = sum(r for _, r, _ in report.imported)
        typer.echo(f"run {report.run_id}: {total} rows on platform {platform}")


def register(app: typer.Typer) -> None:
    app.command("import-ops")(import_ops)
