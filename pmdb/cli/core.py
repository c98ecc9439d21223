"""Core commands: init, platform, status, runs, sql."""
from __future__ import annotations

import textwrap
from importlib import resources
from pathlib import Path
from typing import Optional

import duckdb
import typer

from pmdb import migrator, summary
from pmdb.cli import run_list
from pmdb.cli.common import limit_option, open_store, render, row_limit, workspace
from pmdb.cli.text_table import LIFTED, SHORT_HEADERS, ids_last, terminal_width
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

SQL_TABLE_ROWS = 50     # rows `pmdb sql` prints as a table unless --limit says otherwise
STATUS_RUNS = 10        # latest runs `pmdb status` shows


def init(ctx: typer.Context) -> None:
    """Create the workspace (DuckDB store, MLflow store location, artifacts/); safe to run again."""
    ws = workspace(ctx)
    existed = ws.exists()
    with Store.open(ws, create=True) as store:
        version = migrator.current_version(store.conn)
    typer.echo(f"{'workspace already there' if existed else 'created workspace'}: {ws.home} (schema v{version})")


def platform(ctx: typer.Context,
             name: Optional[str] = typer.Option(None, "--name", "--platform",
                                                help="Register this machine under this name instead of the default "
                                                     "`cpu-<model>-<N>c` / `cuda-<gpu>-x<count>`."),
             list_: bool = typer.Option(False, "--list", help="List every platform with its GPU specs (registered "
                                                              "with `pmdb platform-specs`) and exit.")) -> None:
    """Detect this machine, register it as a platform and print what was detected."""
    from pmdb import platform as platforms

    if list_:
        from collectors.gpu_specs import listing
        with open_store(ctx, read_only=True) as store:
            render(listing(store))
        return
    with open_store(ctx) as store:
        row = platforms.register_local(store, name)
        frame = store.query("SELECT * FROM platforms WHERE name = ?", [row["name"]]).T.reset_index()
    frame.columns = ["field", "value"]
    typer.echo(f"platform {row['name']} (fingerprint {row['fingerprint']})")
    render(frame)


def status(ctx: typer.Context) -> None:
    """Rows per table and platform, and the latest runs."""
    with open_store(ctx, read_only=True) as store:
        version = migrator.current_version(store.conn)
        typer.echo(f"workspace {store.workspace.home}  schema v{version}")
        counts = summary.row_counts(store)
        platform_rows = summary.platforms(store)
        latest, total = run_list.runs_rows(store, limit=STATUS_RUNS)
        registry = _registry_problem(store, workspace(ctx))
    if registry:
        typer.echo(textwrap.fill(f"warning: {registry}", terminal_width(), subsequent_indent="  ",
                                 break_long_words=False, break_on_hyphens=False))
    typer.echo("\nplatforms:")
    render(platform_rows)
    typer.echo("\nrows per table and platform:")
    render(counts, lift=("platform",))
    more = f" ({len(latest)} of {total}; `pmdb runs --limit N` lists more)" if total > len(latest) else ""
    typer.echo(f"\nlatest runs{more}:")
    render(run_list.runs_table(latest), lift=run_list.LIFTED, keep=("run_id",))


def _registry_problem(store: Store, ws: Workspace) -> str | None:
    """One line when the local MLflow registry lacks versions the store mirrors (mlflow.db deleted or replaced);
    None when it agrees, or when the registry is a remote server (`pmdb doctor` checks that one)."""
    if ws.mlflow_uri != ws.local_mlflow_uri:
        return None
    from fitters.registry_mirror import require_mirrored

    try:
        require_mirrored(store, ws)
    except PmdbError as exc:
        return str(exc)
    return None


def runs(ctx: typer.Context,
         kind: Optional[str] = typer.Option(None, help="Only runs of this kind (ops, comms, workload, fit, ...)."),
         status_: Optional[str] = typer.Option(None, "--status", help="Only runs with this status."),
         all_: bool = typer.Option(False, "--all", help="Also the marker runs quickstart records once per step."),
         limit: int = limit_option(20, "At most this many runs, newest first (0: all)."),
         fmt: str = typer.Option("table", "--format", help="table, csv or json (with start and end times).")
         ) -> None:
    """Collection runs, newest first: what each measured, its platform, status (running, completed, failed,
    interrupted) and how long it took; failed and interrupted runs with their reason below the table."""
    if status_ and status_ not in run_list.STATUSES:
        raise PmdbError(f"bad --status {status_!r}: use running, completed, failed or interrupted")
    cap = row_limit(limit)
    with open_store(ctx, read_only=True) as store:
        if fmt != "table":  # csv and json: pandas' frame, with its times
            render(run_list.runs_frame(store, kind=kind, status=status_, markers=all_, limit=cap)[0], fmt)
            return
        listed, total = run_list.runs_rows(store, kind=kind, status=status_, markers=all_, limit=cap)
        hidden = 0 if all_ or kind else run_list.hidden_markers(store, status_)
    render(run_list.runs_table(listed) if len(listed) else listed, lift=run_list.LIFTED, keep=("run_id",))
    for line in run_list.error_lines(listed, terminal_width()):
        typer.echo(line)
    if len(listed) < total:
        typer.echo(f"(showing {len(listed)} of {total} runs; --limit N for more)")
    if hidden:
        typer.echo(f"({hidden} quickstart step markers not shown; --all shows them)")


def named_queries() -> dict[str, tuple[str, str]]:
    """name -> (description, sql) of the queries shipped in sql/queries/."""
    out = {}
    for entry in resources.files("pmdb.sql").joinpath("queries").iterdir():
        if entry.name.endswith(".sql"):
            text = entry.read_text()
            first = text.splitlines()[0] if text else ""
            out[entry.name[:-4]] = (first.lstrip("- ").strip() if first.startswith("--") else "", text)
    return dict(sorted(out.items()))


_READ_ONLY = ("no file or network access (COPY, ATTACH, EXPORT, read_csv/read_text of files, extensions) and "
              "no settings (SET, PRAGMA); use -o FILE to write a result")


def sql(ctx: typer.Context,
        statement: Optional[str] = typer.Argument(None, help="SQL to run against the store (read-only: queries only)."),
        file: Optional[Path] = typer.Option(None, "--file", "-f", help="Run the SQL in this file."),
        query: Optional[str] = typer.Option(None, "--query", "-q", help="Run a named query from sql/queries/."),
        list_: bool = typer.Option(False, "--list", help="List the named queries and exit."),
        fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json."),
        output: Optional[Path] = typer.Option(None, "--output", "-o",
                                              help="Write the result to this file (Parquet when it ends in .parquet)."),
        limit: int = limit_option(SQL_TABLE_ROWS, "At most this many rows in the table (0: all); csv, json and "
                                                   "-o files get every row.")
        ) -> None:
    """Run SQL over the store: a statement, a file, or a named query. Read-only: SELECT (and WITH, DESCRIBE,
    SHOW, EXPLAIN) over the store's tables and v_* views; no writes to the store, no file or network access
    (COPY, ATTACH, EXPORT, read_csv/read_text of files, extensions), no settings (SET, PRAGMA). Write a result
    with -o FILE."""
    cap = row_limit(limit)
    if list_:
        width = terminal_width()
        for name, (description, _) in named_queries().items():
            typer.echo(textwrap.fill(description or "-", width, initial_indent=f"{name:24s} ",
                                     subsequent_indent=" " * 25, break_on_hyphens=False))
        return
    given = [x for x in (statement, file, query) if x]
    if len(given) != 1:
        raise PmdbError("give exactly one of: a SQL statement, --file FILE, --query NAME (or --list)")
    if file:
        if not Path(file).is_file():
            raise PmdbError(f"no such SQL file: {file}")
        text = Path(file).read_text()
    elif query:
        queries = named_queries()
        if query not in queries:
            raise PmdbError(f"unknown named query {query!r} (see `pmdb sql --list`: {', '.join(queries)})")
        text = queries[query][1]
    else:
        text = statement
    with open_store(ctx, read_only=True) as store:
        store.lock_down()
        try:  # a table from plain rows where the result allows (no pandas); csv, json, files from a frame
            frame = store.table(text) if fmt == "table" and output is None else store.query(text)
        except duckdb.PermissionException:
            raise PmdbError(f"`pmdb sql` only reads the store: {_READ_ONLY}") from None
        except duckdb.Error as exc:
            if "configuration has been locked" in str(exc):
                raise PmdbError(f"`pmdb sql` only reads the store: {_READ_ONLY}") from None
            raise PmdbError(f"SQL error: {str(exc).splitlines()[0]}") from None
    if query and fmt == "table" and output is None:  # a named query's table: what tells its rows apart first,
        render(ids_last(frame), limit=cap, lift=LIFTED, labels=SHORT_HEADERS)  # values shared by all rows above
        return
    render(frame, fmt, output, limit=cap)


def register(app: typer.Typer) -> None:
    for command in (init, platform, status, runs, sql):
        app.command()(command)
