"""`pmdb models` (each name's champion, or every version, with test errors and aliases), `pmdb models promote
NAME VERSION` (move `champion`) and `pmdb ui` (the MLflow UI over the workspace, on 127.0.0.1)."""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import limit_option, open_store, render, row_limit, workspace
from pmdb.cli.text_table import cut_segments
from pmdb.errors import PmdbError

models_app = typer.Typer(help="Registered models (kernel, embedding, collective, planner): per name its champion "
                              "version (the latest when it has none) with its held-out test error (GMAE %), test "
                              "rows and aliases; --all lists every version.",
                         no_args_is_help=False, invoke_without_command=True)

UI_STOP_SECONDS = 10.0
PR_SET_PDEATHSIG = 1  # linux/prctl.h
MODELS_TABLE_ROWS = 50  # rows `pmdb models` prints as a table unless --limit says otherwise
_TABLE_LABELS = {"version": "ver", "gmae_pct": "gmae%", "val_pct": "val%"}


@models_app.callback(invoke_without_command=True)
def models(ctx: typer.Context,
           platform: Optional[str] = typer.Option(None, "--platform", help="Only this platform's models."),
           op: Optional[str] = typer.Option(None, "--op", help="Only models of this op or collective."),
           alias: Optional[str] = typer.Option(None, "--alias", help="Only versions holding this alias "
                                               "(champion, latest); implies --all."),
           all_: bool = typer.Option(False, "--all", help="Every version, not only each name's champion."),
           limit: int = limit_option(MODELS_TABLE_ROWS, "At most this many rows in the table (0: all); csv and "
                                                        "json get every row."),
           fmt: str = typer.Option("table", "--format", help="table, csv or json (csv and json: every column).")
           ) -> None:
    """Registered models: per name its champion version (the latest when it has none) with its held-out test
    error (GMAE %), test rows and aliases; --all lists every version, newest first per name, with its GMAE on the
    validation rows that chose the champion (val%; with under 3 configurations there, the analytic family is
    champion)."""
    if ctx.invoked_subcommand is not None:
        return
    cap = row_limit(limit)
    where, args = [], []
    for column, value in (("m.platform", platform), ("m.op", op)):
        if value:
            where.append(f"{column} = ?")
            args.append(value)
    sql = ("SELECT m.name, m.version, m.family, m.platform, m.op, m.pass, m.cache_state, m.world_size, "
           "round(100 * m.test_gmae, 2) AS gmae_pct, round(100 * m.test_mape, 2) AS mape_pct, "
           "round(100 * m.test_std, 2) AS std_pct, m.n_train, m.n_test, "
           "round(100 * m.validation_gmae, 2) AS val_pct, m.validation_configs, "
           "(SELECT string_agg(a.alias, ',' ORDER BY a.alias) FROM model_aliases a "
           " WHERE a.name = m.name AND a.version = m.version) AS aliases, m.created_at "
           "FROM model_versions m" + (" WHERE " + " AND ".join(where) if where else "")
           + " ORDER BY m.platform, m.name, m.version DESC")
    with open_store(ctx, read_only=True) as store:
        if platform is not None:
            platforms.load(store, platform)  # the one-line unknown-platform error
        frame = store.query(sql, args)
    held = frame["aliases"].fillna("").str.split(",")
    if alias:
        frame = frame[held.map(lambda a: alias in a)]
    elif not all_:  # one row per name: its champion, else its newest version
        rank = held.map(lambda a: "champion" not in a)
        frame = frame.assign(_rank=rank).sort_values(["name", "_rank", "version"], ascending=[True, True, False],
                                                     kind="stable")
        frame = frame.drop_duplicates("name").drop(columns="_rank")
        frame = frame.sort_values(["platform", "name"], kind="stable").reset_index(drop=True)
    if fmt != "table":
        render(frame, fmt)
        return
    # the table: short columns (family only beside other versions of a name), names without their platform
    # ('~<platform>', or the legacy 'pmdb.<platform>.') when one platform is shown (it is printed above the table)
    family = ["family"] if all_ or alias else []
    # beside the other versions of a name, what chose its champion: GMAE on the training side's validation rows
    validation = ["val_pct"] if all_ or alias else []
    table = frame[["name", "platform", "version", *family, "gmae_pct", *validation, "n_test", "aliases"]]
    shown = frame["platform"].dropna().unique()
    if len(shown) == 1:
        prefix, suffix = f"pmdb.{shown[0]}.", f"~{shown[0]}"
        table = table.assign(name=table["name"].map(
            lambda n: n[len(prefix):] if n.startswith(prefix) else n[:-len(suffix)] if n.endswith(suffix) else n))
    render(table, limit=cap, labels=_TABLE_LABELS, lift=("platform",), cutters={"name": cut_segments})


@models_app.command("promote")
def promote(ctx: typer.Context,
            name: str = typer.Argument(..., help="Registered model name (see `pmdb models`)."),
            version: int = typer.Argument(..., help="Version that becomes the champion.")) -> None:
    """Move the champion alias of NAME to VERSION (in MLflow and in the store's mirror)."""
    from fitters.registry import Registry, promote as promote_version

    with open_store(ctx) as store:
        promote_version(store, Registry(workspace(ctx), store), name, version)
    typer.echo(f"{name}: champion -> version {version}")


def ui(ctx: typer.Context,
       port: int = typer.Option(5000, "--port", min=1, max=65535, help="Port on 127.0.0.1 to serve the UI on.")
       ) -> None:
    """Start the MLflow UI on 127.0.0.1 against the workspace (one worker, job execution off); Ctrl-C stops it."""
    from fitters.registry import Registry

    ws = workspace(ctx).require()
    if ws.mlflow_uri != ws.local_mlflow_uri:
        raise PmdbError(f"the registry is {ws.mlflow_uri} (--tracking-uri or MLFLOW_TRACKING_URI): open that "
                        f"server's own UI; `pmdb ui` serves a workspace's mlflow.db")
    registry = Registry(ws)  # creates the sqlite store from this one process before the server starts
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
           "DO_NOT_TRACK": "true"}
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", registry.uri,
               "--default-artifact-root", ws.mlflow_artifacts.resolve().as_uri(), "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1"]
    with _stop_signals():
        server = subprocess.Popen(command, env=env, start_new_session=True, preexec_fn=_die_with_parent)
        try:
            typer.echo(f"MLflow UI at http://127.0.0.1:{port} (workspace {ws.home}); Ctrl-C stops it", err=False)
            code = _wait(server)
        except KeyboardInterrupt:
            _stop(server)
            typer.echo("MLflow UI stopped")
            return
        finally:
            if server.poll() is None:  # whatever ended the wait, the server goes with this process
                _stop(server)
    if code != 0:
        raise PmdbError(f"the MLflow UI exited with code {code} (is port {port} free? try --port)")


@contextmanager
def _stop_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt (once: a second signal does not cut the server's stop
    short) while the UI runs. A job that a non-interactive shell starts in the background (`pmdb ui &`) inherits
    SIGINT ignored, and Python leaves it so: without this, SIGINT did nothing to a background `pmdb ui`."""
    fired: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not fired:
            fired.append(signum)
            raise KeyboardInterrupt

    saved = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def _die_with_parent() -> None:
    """In the server's process before exec: SIGTERM when pmdb dies, even by SIGKILL (Linux prctl; elsewhere a
    no-op)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return


def _wait(server: subprocess.Popen) -> int:
    """The server's exit code, waiting in short slices: a Ctrl-C that the kernel hands to another thread of this
    process does not interrupt a blocking waitpid, and Python raises KeyboardInterrupt only once the main thread is
    back in the interpreter (a CI run waited > 60 s for a SIGINT here)."""
    while True:
        try:
            return server.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            continue


def _stop(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group, then SIGKILL what is left after UI_STOP_SECONDS."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=UI_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; its workers may still be shutting down
            os.killpg(server.pid, 0)
        except ProcessLookupError:
            return


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
    app.command("ui")(ui)
