"""``pmdb collect import-ops``: kernel measurements recorded elsewhere (NeuSight tables, or the generic CSV/Parquet
format) into ``op_measurements`` of a named platform; atomic and idempotent by file checksum."""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import List, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store
from pmdb.errors import PmdbError

_FORMATS = {"neusight": "collectors.importers.neusight", "generic": "collectors.importers.generic_ops"}


def import_ops(ctx: typer.Context,
               files: Optional[List[Path]] = typer.Argument(
                   None, metavar="FILES",
                   help="Files to import (.csv, .csv.gz, .parquet; a directory stands for those files in it). "
                        "All are checked before anything is stored; all or none are imported; a file already "
                        "imported (same sha256) is skipped."),
               fmt: Optional[str] = typer.Option(
                   None, "--format", help="neusight: NeuSight <GPU>/<op>.csv.gz tables (Latency in ms). generic: "
                                          "columns op, time_us|time_ms|time_ns|time_s (or time + unit), the op's "
                                          "parameters in pmdb's names, optional pass, dtype, device, kernel, "
                                          "repetitions, std_<unit>."),
               platform: Optional[str] = typer.Option(
                   None, "--platform", help="Name of the GPU (or machine) the files were measured on; created as an "
                                            "imported platform if new. Never this machine's own platform."),
               device_kind: str = typer.Option("cuda", "--device-kind",
                                               help="cuda or cpu: the kind of the named platform (neusight: cuda). "
                                                    "cuda rows are stored with cache state 'device'.")) -> None:
    """Import kernel timings measured elsewhere into a named platform (times stored in µs)."""
    if fmt not in _FORMATS:
        raise PmdbError(f"bad --format {fmt!r}: use {' or '.join(_FORMATS)}" if fmt else
                        f"give --format ({' or '.join(_FORMATS)})")
    if device_kind not in ("cuda", "cpu"):
        raise PmdbError(f"bad --device-kind {device_kind!r}: use cuda or cpu")
    if fmt == "neusight" and device_kind != "cuda":
        raise PmdbError("NeuSight tables are GPU timings: --device-kind must be cuda")
    if not platform:
        raise PmdbError("give --platform NAME: the GPU the files were measured on (e.g. tesla-v100-pcie-32gb)")
    platforms.check_name(platform)
    if not files:
        raise PmdbError("give the files (or directories) to import; see `pmdb collect import-ops --help`")
    from collectors.importers.ops_common import expand, import_op_files

    paths = expand(files)  # every file exists before the store is opened
    parser = importlib.import_module(_FORMATS[fmt]).parse
    with open_store(ctx) as store:
        report = import_op_files(store, paths, fmt, parser, platform=platform, device_kind=device_kind)
    for path, rows, ops in report.imported:
        typer.echo(f"imported {path}: {rows} rows ({ops})")
    for path, reason in report.skipped:
        typer.echo(f"skipped {path}: {reason}")
    if report.run_id:
        total = sum(r for _, r, _ in report.imported)
        typer.echo(f"run {report.run_id}: {total} rows on platform {platform}")
    else:
        typer.echo(f"nothing new to import on platform {platform}")


def register(app: typer.Typer) -> None:
    app.command("import-ops")(import_ops)
