"""Core commands: init, platform, status, runs, sql."""
from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Optional

import duckdb
import typer

from pmdb import migrator, platform as platforms
from pmdb.cli.common import open_store, render, workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

# table -> its platform column, for `pmdb status`
_TABLES_WITH_PLATFORM = {"op_measurements": "platform", "collective_measurements": "platform",
                         "platform_peaks": "platform", "workload_runs": "platform", "trace_sets": "platform",
                         "overhead_versions": "platform", "model_versions": "platform",
                         "predictions": "target_platform"}


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
        parts = [f"SELECT '{t}' AS table_name, {col} AS platform, count(*) AS rows FROM {t} GROUP BY {col}"
                 for t, col in _TABLES_WITH_PLATFORM.items()]
        counts = store.query(" UNION ALL ".join(parts) + " ORDER BY table_name, platform")
        platforms_frame = store.query("SELECT name, device_kind, cpu_model, gpu_name, gpu_count, is_imported "
                                      "FROM platforms ORDER BY name")
        latest = store.query("SELECT run_id, kind, platform, status, started_at, finished_at FROM collection_runs "
                             "ORDER BY started_at DESC LIMIT 10")
    typer.echo("\nplatforms:")
    render(platforms_frame)
    typer.echo("\nrows per table and platform:")
    render(counts)
    typer.echo("\nlatest runs:")
    render(latest)


def runs(ctx: typer.Context,
         kind: Optional[str] = typer.Option(None, help="Only runs of this kind (ops, comms, workload, fit, ...)."),
         status_: Optional[str] = typer.Option(None, "--status", help="Only runs with this status."),
         limit: int = typer.Option(50, help="At most this many runs, newest first."),
         fmt: str = typer.Option("table", "--format", help="table, csv or json.")) -> None:
    """Collection runs with their status (running, completed, failed, interrupted)."""
    if status_ and status_ not in ("running", "completed", "failed", "interrupted"):
        raise PmdbError(f"bad --status {status_!r}: use running, completed, failed or interrupted")
    where, params = [], []
    if kind:
        where.append("kind = ?"), params.append(kind)
    if status_:
        where.append("status = ?"), params.append(status_)
    sql = ("SELECT run_id, kind, platform, status, started_at, finished_at, error FROM collection_runs"
           + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY started_at DESC LIMIT ?")
    with open_store(ctx, read_only=True) as store:
        render(store.query(sql, params + [limit]), fmt)


def named_queries() -> dict[str, tuple[str, str]]:
    """name -> (description, sql) of the queries shipped in sql/queries/."""
    out = {}
    for entry in resources.files("pmdb.sql").joinpath("queries").iterdir():
        if entry.name.endswith(".sql"):
            text = entry.read_text()
            first = text.splitlines()[0] if text else ""
            out[entry.name[:-4]] = (first.lstrip("- ").strip() if first.startswith("--") else "", text)
    return dict(sorted(out.items()))


def sql(ctx: typer.Context,
        statement: Optional[str] = typer.Argument(None, help="SQL to run against the store (read-only)."),
        file: Optional[Path] = typer.Option(None, "--file", "-f", help="Run the SQL in this file."),
        query: Optional[str] = typer.Option(None, "--query", "-q", help="Run a named query from sql/queries/."),
        list_: bool = typer.Option(False, "--list", help="List the named queries and exit."),
        fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json."),
        output: Optional[Path] = typer.Option(None, "--output", "-o",
                                              help="Write the result to this file (Parquet when it ends in .parquet).")
        ) -> None:
    """Run SQL over the store: a statement, a file, or a named query. The store is opened read-only."""
    if list_:
        for name, (description, _) in named_queries().items():
            typer.echo(f"{name:24s} {description}")
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
        try:
            frame = store.query(text)
        except duckdb.Error as exc:
            raise PmdbError(f"SQL error: {str(exc).splitlines()[0]}") from None
    render(frame, fmt, output)


def register(app: typer.Typer) -> None:
    for command in (init, platform, status, runs, sql):
        app.command()(command)
