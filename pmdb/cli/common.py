"""Shared pieces of the CLI: the workspace from ``--home``, opening the store, table output."""
from __future__ import annotations

import importlib
import json
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence

import typer

from pmdb.cli.text_table import (Cutter, as_rows, column_cells, column_names, cut, dropped_note, is_empty,
                                 layout, terminal_width)
from pmdb.config import Workspace, resolve_workspace
from pmdb.errors import PmdbError
from pmdb.rows import Rows

if TYPE_CHECKING:  # pandas and the store (DuckDB) load when a command opens the store, not at start-up
    import pandas as pd

    from pmdb.cli.text_table import Table
    from pmdb.store import Store

ALL_ROWS_HINT = "--limit N or --format csv for all"
LEGEND_LENGTH = 12  # values of a legend column longer than this are shown as [1], [2], ... in the table


def _hide_flag_types() -> None:
    """Typer's help shows a flag (``--all``, ``--help``) with a ``<bool>`` type as if it took a value: show none.

    Typer has no public hook for this, so its option class's ``display_type_rich`` is wrapped where this typer has
    one (0.29 does); another typer (a GPU image's) lacks it or spells it differently, and then help keeps typer's
    own types: a cosmetic difference, never a failed start."""
    option = getattr(getattr(typer, "core", None), "TyperOption", None)
    shown = getattr(option, "display_type_rich", None)
    if option is None or not callable(shown) or getattr(shown, "pmdb_hides_flags", False):
        return

    def display_type_rich(self: Any, ctx: typer.Context) -> Optional[str]:
        return None if getattr(self, "is_flag", False) and self.metavar is None else shown(self, ctx)

    display_type_rich.pmdb_hides_flags = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich


def click_exceptions() -> ModuleType:
    """The ``exceptions`` module of the click this typer runs on: typer 0.29 carries its own copy of click (its
    Context derives from that copy's), older typers use the ``click`` package. Found from ``typer.Context``'s base
    class, so no private typer name is imported."""
    base = next((c for c in typer.Context.__mro__[1:] if c.__name__ == "Context"), None)
    package = base.__module__.rsplit(".", 1)[0] if base is not None else "click"
    return importlib.import_module(f"{package}.exceptions")


_hide_flag_types()

PlatformOption = typer.Option(None, "--platform", help="Platform name to use (default: this machine, registered on first use).")


def workspace(ctx: typer.Context) -> Workspace:
    """The workspace chosen by the top-level ``--home`` (or $PMDB_HOME, or ./pmdb-workspace)."""
    root = ctx.find_root()
    return root.obj if isinstance(root.obj, Workspace) else resolve_workspace(None)


def open_store(ctx: typer.Context, *, read_only: bool = False, create: bool = False) -> Store:
    from pmdb.store import Store

    return Store.open(workspace(ctx), read_only=read_only, create=create)


def full_run_id(ctx: typer.Context, text: Optional[str]) -> Optional[str]:
    """A run id as given, or the whole id of the one run it is the start of (`pmdb runs` shows the first 12)."""
    if text is None:
        return None
    with open_store(ctx, read_only=True) as store:
        return store.resolve_run_id(text)


def limit_option(default: int, help: str) -> int:
    """A ``--limit N`` option (validate it with ``row_limit``)."""
    return typer.Option(default, "--limit", metavar="N", help=help)


def row_limit(limit: int) -> Optional[int]:
    """The row cap a ``--limit`` asks for: None for 0 (every row); a one-line error when negative."""
    if limit < 0:
        raise PmdbError(f"bad --limit {limit}: give a number of rows, or 0 for all")
    return limit or None


def render(frame: Table, fmt: str = "table", output: Optional[Path] = None, *, limit: Optional[int] = None,
           hint: str = ALL_ROWS_HINT, labels: Optional[Mapping[str, str]] = None, lift: Sequence[str] = (),
           keep: Sequence[str] = (), cutters: Optional[Mapping[str, Cutter]] = None,
           legend: Sequence[str] = ()) -> None:
    """Print a frame as table/csv/json, or write it to ``output`` (Parquet when it ends in .parquet).

    csv, json and files get every row and column as they are. The table fits the terminal: at most ``limit`` rows
    (a note gives the total and ``hint``), headers renamed by ``labels``, a column of ``lift`` holding one value
    printed above the table instead ('platform: NAME'), long cells cut with '…' (never those of ``keep``; those of
    ``cutters`` their own way), long values of a ``legend`` column shown as [1], [2], ... with the values listed
    below the table, columns that do not fit left out with a note naming them. Plain :class:`Rows` print as a
    table only (csv, json and files take the DataFrame)."""
    if fmt not in ("table", "csv", "json"):
        raise PmdbError(f"bad --format {fmt!r}: use table, csv or json")
    if isinstance(frame, Rows) and (fmt != "table" or output is not None):
        raise TypeError("render: csv, json and files are written from a DataFrame, not Rows")
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
        typer.echo("(no rows)" if column_names(frame) else "(no result)")
    else:
        typer.echo("\n".join(table_lines(frame, limit=limit, hint=hint, labels=labels, lift=lift, keep=keep,
                                         cutters=cutters, legend=legend)))


def table_lines(frame: Table, *, limit: Optional[int] = None, hint: str = ALL_ROWS_HINT,
                labels: Optional[Mapping[str, str]] = None, lift: Sequence[str] = (), keep: Sequence[str] = (),
                cutters: Optional[Mapping[str, Cutter]] = None, legend: Sequence[str] = (),
                width: Optional[int] = None) -> list[str]:
    """The lines ``render`` prints for a table (see there); ``width`` defaults to the terminal's."""
    width = width or terminal_width()
    labels = dict(labels or {})
    lines: list[str] = []
    for column in lift:  # a DataFrame as it is: its cells are read as Rows below, of the rows shown only
        values = _values(frame, column)
        if values and not is_empty(values[0]) and all(v == values[0] for v in values):
            lines.append(cut(f"{labels.get(column, column)}: {values[0]}", width))
            frame = frame.drop([column]) if isinstance(frame, Rows) else frame.drop(columns=[column])
    total = len(frame)
    if limit and total > limit:
        frame = frame.head(limit)
    frame = as_rows(frame)
    whole = frame  # before long values become legend keys
    below: dict[str, list[str]] = {}  # legend lines per (labelled) column
    for column in legend:
        if column not in frame.names:
            continue
        keys: dict[str, str] = {}
        for value in frame.column(column):
            if not is_empty(value) and len(str(value)) > LEGEND_LENGTH:
                keys.setdefault(str(value), f"[{len(keys) + sum(map(len, below.values())) + 1}]")
        if keys:  # keys among the values: each shown as text
            frame = frame.with_column(column, [keys.get(str(v), v) for v in frame.column(column)])
        below[labels.get(column, column)] = [cut(f"{key} {value}", width) for value, key in keys.items()]
    body, dropped = layout(frame.rename(labels), width, keep=[labels.get(k, k) for k in keep],
                           cutters={labels.get(k, k): f for k, f in (cutters or {}).items()})
    if dropped and len(frame) == 1:  # one row too wide for a line: one line per column instead
        return lines + record_lines(whole.rename(labels), width)
    lines += body
    for column, listed in below.items():
        lines += [] if column in dropped else listed
    if len(frame) < total:
        lines.append(cut(f"(showing {len(frame)} of {total} rows; {hint})", width))
    if dropped:
        lines.append(dropped_note(dropped, width))
    return lines


def _values(frame: Table, column: str) -> list[Any]:
    """The values of ``column`` in ``frame`` ([] without it)."""
    if column not in column_names(frame):
        return []
    return frame.column(column) if isinstance(frame, Rows) else frame[column].tolist()


def record_lines(frame: Table, width: int) -> list[str]:
    """The one row of ``frame`` as 'column  value' lines, values cut to ``width``."""
    frame = as_rows(frame)
    pad = max(map(len, frame.names))
    return [cut(f"{name.ljust(pad)}  {column_cells(frame.column(i), frame.kinds[i])[0][0]}", width)
            for i, name in enumerate(frame.names)]
