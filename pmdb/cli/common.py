"""Shared pieces of the CLI: the workspace from ``--home``, opening the store, table output."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import pandas as pd
import typer

from pmdb.config import Workspace, resolve_workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

PlatformOption = typer.Option(None, "--platform", help="Platform name to use (default: this machine, registered on first use).")


def workspace(ctx: typer.Context) -> Workspace:
    """The workspace chosen by the top-level ``--home`` (or $PMDB_HOME, or ./pmdb-workspace)."""
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, Workspace) else resolve_workspace(None)


def open_store(ctx: typer.Context, *, read_only: bool = False, create: bool = False) -> Store:
    return Store.open(workspace(ctx), read_only=read_only, create=create)


def render(frame: pd.DataFrame, fmt: str = "table", output: Optional[Path] = None) -> None:
    """Print a frame as table/csv/json, or write it to ``output`` (Parquet when it ends in .parquet)."""
    if fmt not in ("table", "csv", "json"):
        raise PmdbError(f"bad --format {fmt!r}: use table, csv or json")
    if output is not None:
        output = Path(output)
        if not output.parent.exists():
            raise PmdbError(f"cannot write {output}: directory {output.parent} does not exist")
        if output.suffix == ".parquet":
            frame.to_parquet(output, index=False)
        elif fmt == "json" or output.suffix == ".json":
            output.write_text(frame.to_json(orient="records", date_format="iso", indent=1))
        elif fmt == "csv" or output.suffix == ".csv":
            frame.to_csv(output, index=False)
        else:
            output.write_text(frame.to_string(index=False) + "\n")
        typer.echo(f"wrote {len(frame)} rows to {output}")
        return
    if fmt == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    elif fmt == "json":
        typer.echo(json.dumps(json.loads(frame.to_json(orient="records", date_format="iso")), indent=1))
    elif frame.empty:
        typer.echo("(no rows)" if len(frame.columns) else "(no result)")
    else:
        with pd.option_context("display.max_rows", 500, "display.max_columns", 50, "display.width", 200,
                               "display.max_colwidth", 60):
            typer.echo(frame.to_string(index=False))
