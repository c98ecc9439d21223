"""The DuckDB store: opening (with migrations and a holder note for lock errors), batched writes and the
collection-run lifecycle (running -> completed | failed | interrupted)."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import duckdb
import numpy as np
import pandas as pd

import pmdb
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.errors import PmdbError

BATCH_ROWS = 2000  # rows per write transaction: an interruption loses at most this batch


def _pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def git_revision() -> str | None:
    """git HEAD of the pmdb source tree, when it is a checkout."""
    src = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def _json_default(value: Any) -> Any:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (Path, datetime)):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(value: Any) -> str | None:
    """JSON text for a JSON column (None stays NULL)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, default=_json_default, sort_keys=True)


class Store:
    """One open connection to a workspace's ``pmdb.duckdb``.

    Open with :meth:`open`; use as a context manager. Writers leave a holder note beside the file so a second
    writer's error can name the command holding the store.
    """

    def __init__(self, workspace: Workspace, conn: duckdb.DuckDBPyConnection, read_only: bool):
        self.workspace = workspace
        self.conn = conn
        self.read_only = read_only
        self._json_columns: dict[str, set[str]] = {}
        self._holder_written = False

    # ---- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, workspace: Workspace, *, read_only: bool = False, create: bool = False,
             command: str | None = None) -> "Store":
        """Open the store (creating the workspace when ``create``), apply pending migrations, mark stale runs."""
        if create:
            workspace.create_dirs()
        else:
            workspace.require()
        if read_only:
            store = cls._connect(workspace, read_only=False, command=command)
            store.close()  # migrations and stale-run marking need a writer once
        store = cls._connect(workspace, read_only=read_only, command=command)
        if not read_only:
            migrator.migrate(store.conn)
            store._install_views()
            store.mark_stale_runs()
        return store

    @classmethod
    def _connect(cls, workspace: Workspace, *, read_only: bool, command: str | None) -> "Store":
        try:
            conn = duckdb.connect(str(workspace.db_path), read_only=read_only)
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise PmdbError(_lock_message(workspace)) from None
            raise PmdbError(f"cannot open {workspace.db_path}: {str(exc).splitlines()[0]}") from None
        store = cls(workspace, conn, read_only)
        if not read_only:
            store._write_holder(command)
        return store

    @property
    def _holder_path(self) -> Path:
        return _holder_path(self.workspace)

    def _write_holder(self, command: str | None) -> None:
        note = {"pid": os.getpid(), "host": socket.gethostname(),
                "command": command or " ".join(["pmdb", *sys.argv[1:]]),
                "since": datetime.now().isoformat(timespec="seconds")}
        self._holder_path.write_text(json.dumps(note))
        self._holder_written = True

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None  # type: ignore[assignment]
        if self._holder_written:
            with contextlib.suppress(OSError):
                note = json.loads(self._holder_path.read_text())
                if note.get("pid") == os.getpid():
                    self._holder_path.unlink()
            self._holder_written = False

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _install_views(self) -> None:
        """(Re)create the views shipped in sql/views/, in file-name order."""
        views = sorted((e for e in resources.files("pmdb.sql").joinpath("views").iterdir()
                        if e.name.endswith(".sql")), key=lambda e: e.name)
        for entry in views:
            self.conn.execute(entry.read_text())

    # ---- queries and writes ------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pd.DataFrame:
        return self.conn.execute(sql, params).df() if params is not None else self.conn.execute(sql).df()

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """The first column of the first row (None without rows). The whole result is fetched, so that no result
        stays open on the connection (a pending one made a later ``register()`` fail)."""
        rows = self.conn.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self.conn.execute("BEGIN TRANSACTION")
        try:
            yield
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    def json_columns(self, table: str) -> set[str]:
        if table not in self._json_columns:
            rows = self.conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = ? AND data_type = 'JSON'",
                [table]).fetchall()
            self._json_columns[table] = {r[0] for r in rows}
        return self._json_columns[table]

    def insert(self, table: str, rows: pd.DataFrame | Iterable[Mapping[str, Any]], *,
               returning: str | None = None) -> list[Any]:
        """Insert rows (dicts or a DataFrame) in transactions of at most BATCH_ROWS rows.

        Dict/list values of JSON columns are serialised. Returns the ``returning`` column's values, if asked.
        """
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        if frame.empty:
            return []
        frame = frame.copy()
        for column in self.json_columns(table) & set(frame.columns):
            frame[column] = frame[column].map(to_json).astype(object)
        columns = ", ".join(f'"{c}"' for c in frame.columns)
        tail = f" RETURNING {returning}" if returning else ""
        out: list[Any] = []
        for start in range(0, len(frame), BATCH_ROWS):
            chunk = frame.iloc[start:start + BATCH_ROWS]
            self.conn.register("_pmdb_chunk", chunk)
            try:
                with self.transaction():
                    result = self.conn.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM _pmdb_chunk{tail}")
                    if returning:
                        out.extend(r[0] for r in result.fetchall())
            finally:
                self.conn.unregister("_pmdb_chunk")
        return out

    def insert_one(self, table: str, row: Mapping[str, Any], *, returning: str | None = None) -> Any:
        """Insert one row; returns the ``returning`` column's value."""
        cols = list(row)
        json_cols = self.json_columns(table)
        values = [to_json(row[c]) if c in json_cols else row[c] for c in cols]
        tail = f" RETURNING {returning}" if returning else ""
        sql = f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}){tail}"
        result = self.conn.execute(sql, values)
        return result.fetchone()[0] if returning else None

    # ---- runs --------------------------------------------------------------------------------------------
    def mark_stale_runs(self) -> int:
        """Mark 'running' runs whose process is gone as 'interrupted'. Returns how many were marked."""
        host = socket.gethostname()
        stale = [run_id for run_id, pid, run_host in self.conn.execute(
            "SELECT run_id, pid, hostname FROM collection_runs WHERE status = 'running'").fetchall()
            if run_host != host or not _pid_alive(pid) or pid == os.getpid()]
        for run_id in stale:
            self.conn.execute(
                "UPDATE collection_runs SET status = 'interrupted', finished_at = current_timestamp, "
                "error = coalesce(error, 'the process ended before the run finished') WHERE run_id = ?", [run_id])
        return len(stale)

    def start_run(self, kind: str, platform: str | None, args: Mapping[str, Any] | None = None,
                  command: str | None = None) -> "Run":
        run = Run(self, uuid.uuid4().hex, kind, platform)
        self.insert_one("collection_runs", {
            "run_id": run.run_id, "kind": kind, "platform": platform, "args": dict(args or {}),
            "command": command or " ".join(["pmdb", *sys.argv[1:]]), "pmdb_version": pmdb.__version__,
            "git_revision": git_revision(), "hostname": socket.gethostname(), "pid": os.getpid(),
            "status": "running"})
        return run

    @contextlib.contextmanager
    def run(self, kind: str, platform: str | None, args: Mapping[str, Any] | None = None) -> Iterator["Run"]:
        """A collection run: completed on normal exit, interrupted on Ctrl-C, failed on any other error."""
        run = self.start_run(kind, platform, args)
        try:
            yield run
        except KeyboardInterrupt:
            run.finish("interrupted", "interrupted by the user (Ctrl-C or SIGTERM)")
            raise
        except BaseException as exc:
            run.finish("failed", _one_line(exc))
            raise
        run.finish("completed")


@dataclass
class Run:
    """Handle of one collection run; ``summary`` is stored with the run when it finishes."""

    store: Store
    run_id: str
    kind: str
    platform: str | None
    summary: dict[str, Any] = field(default_factory=dict)

    def finish(self, status: str, error: str | None = None) -> None:
        self.store.conn.execute(
            "UPDATE collection_runs SET status = ?, finished_at = current_timestamp, error = ?, summary = ? "
            "WHERE run_id = ?", [status, error, to_json(self.summary), self.run_id])


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def _holder_path(workspace: Workspace) -> Path:
    return workspace.db_path.with_name(workspace.db_path.name + ".holder")


def _lock_message(workspace: Workspace) -> str:
    try:
        note = json.loads(_holder_path(workspace).read_text())
        who = f"`{note['command']}` (pid {note['pid']}, since {note['since']})"
    except (OSError, ValueError, KeyError):
        who = "another process"
    return (f"the store {workspace.db_path} is in use by {who}; DuckDB allows one writer at a time: "
            f"wait for it to finish or stop it, then retry")
