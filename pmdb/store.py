"""The DuckDB store: opening (with migrations and a holder note for lock errors), batched writes and the
collection-run lifecycle (running -> completed | failed | interrupted)."""
from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence

import duckdb

if TYPE_CHECKING:  # pandas (and numpy under it) loads when a query returns a frame or rows are inserted
    import pandas as pd

import pmdb
from pmdb import migrator, op_coverage
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.rows import Rows, plain

BATCH_ROWS = 2000  # rows per write transaction: an interruption loses at most this batch
PLAIN_ROWS = 100_000  # rows Store.table returns as plain rows (~0.25 s of tuples); a larger result as a DataFrame


RUN_ID_SHOWN = 12     # characters of a run id that `pmdb runs` and `pmdb status` show
RUN_PREFIX_MIN = 6    # the shortest prefix a command takes for a run id


class StoreWriteError(PmdbError):
    """Rows could not be written (disk full, I/O error): the run fails, rows committed before are kept."""

    exit_code = 1


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C/SIGTERM ended a collection run; the message says what the run kept."""


_interruptions: list[str] = []  # what interrupted runs of this process kept, for the CLI's closing line


def interruptions() -> list[str]:
    """One line per run of this process that Ctrl-C/SIGTERM interrupted: the run and the rows it kept."""
    return list(_interruptions)


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
    np = sys.modules.get("numpy")  # a numpy value means numpy is loaded: no import for the others
    if np is not None and isinstance(value, np.integer):
        return int(value)
    if np is not None and isinstance(value, np.floating):
        return float(value)
    if np is not None and isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (Path, datetime)):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def to_json(value: Any) -> str | None:
    """JSON text for a JSON column (None, NaN and pandas' NA stay NULL)."""
    pandas = sys.modules.get("pandas")  # pandas' NA means pandas is loaded
    if value is None or (pandas is not None and value is pandas.NA) or (isinstance(value, float)
                                                                         and value != value):
        return None
    if isinstance(value, str):
        return value
    return _ENCODER.encode(value)


# one encoder for every value: json.dumps with options builds a new one per call (a third of an import's inserts)
_ENCODER = json.JSONEncoder(default=_json_default, sort_keys=True)


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
        self._in_transaction = False

    # ---- opening -------------------------------------------------------------------------------------------
    @classmethod
    def open(cls, workspace: Workspace, *, read_only: bool = False, create: bool = False,
             command: str | None = None) -> "Store":
        """Open the store (creating the workspace when ``create``), check it, apply pending migrations and mark
        stale runs. Readers share the store: they open it read-only (a writer once only when migrations are due)
        and see runs whose process is gone as 'interrupted'."""
        if create:
            workspace.create_dirs()
        else:
            workspace.require()
        if read_only:
            store = cls._connect(workspace, read_only=True, command=command)
            try:
                pending = migrator.check(store.conn, migrator.available())
            except BaseException:
                store.close()
                raise
            if pending:  # an older store: migrate it once with a writer, then read
                store.close()
                cls.open(workspace, command=command).close()
                store = cls._connect(workspace, read_only=True, command=command)
            try:
                store._install_views(temporary=True)
            except BaseException:
                store.close()
                raise
            store._show_stale_runs()
            return store
        store = cls._connect(workspace, read_only=False, command=command)
        try:
            migrator.migrate(store.conn)
            store._install_views()
            store.mark_stale_runs()
        except BaseException:
            store.close()
            raise
        return store

    @classmethod
    def _connect(cls, workspace: Workspace, *, read_only: bool, command: str | None) -> "Store":
        path = workspace.db_path
        try:
            conn = duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as exc:
            text = str(exc)
            if "lock" in text.lower():
                raise PmdbError(_lock_message(workspace, read_only)) from None
            wal = path.with_name(path.name + ".wal")
            if "wal" in text.lower() and wal.exists():
                raise PmdbError(
                    f"the store's write-ahead log {wal} is damaged ({_first_line(text)}): move it aside "
                    f"(`mv {wal} {wal}.damaged`) to open the store as of its last checkpoint; the writes logged "
                    f"since then are lost") from None
            if "not a valid duckdb database" in text.lower():
                size = path.stat().st_size if path.exists() else 0
                empty = ", empty" if not size else ""
                raise PmdbError(f"the store {path} is not a DuckDB database ({size} bytes{empty})"
                                f"; restore it from a backup, or move it aside and create a new store: "
                                f"`mv {path} {path}.damaged` then `pmdb init`") from None
            hint = f": it is damaged: {_DAMAGED_HINT}" if _looks_damaged(text) else ""
            raise PmdbError(f"cannot open the store {path} ({_first_line(text)}){hint}") from None
        store = cls(workspace, conn, read_only)
        try:
            store._check_integrity()
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # leave a damaged file as found: no checkpoint into it
                conn.execute("PRAGMA disable_checkpoint_on_shutdown")
            conn.close()
            raise
        if not read_only:
            store._write_holder(command)
        return store

    def _check_integrity(self) -> None:
        """Refuse a store file shorter than the blocks its tables use (truncated or cut by a failed copy)."""
        path = self.workspace.db_path
        try:
            tables = [t for (t,) in self.conn.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() "
                "AND NOT temporary").fetchall()]
            block_size = self.conn.execute(
                "SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()").fetchone()
            highest = -1
            for start in range(0, len(tables), 50):
                parts = [f"SELECT max(block_id) AS b FROM pragma_storage_info('{t}') WHERE persistent"
                         for t in tables[start:start + 50]]
                if parts:
                    value = self.conn.execute(f"SELECT max(b) FROM ({' UNION ALL '.join(parts)})").fetchone()[0]
                    highest = max(highest, -1 if value is None else int(value))
        except duckdb.Error as exc:
            raise PmdbError(f"the store {path} is damaged ({_first_line(str(exc))}): {_DAMAGED_HINT}") from None
        if highest >= 0 and block_size:
            needed = _HEADER_BYTES + (highest + 1) * int(block_size[0])
            size = path.stat().st_size
            if size < needed:
                raise PmdbError(f"the store {path} is damaged: the file has {size} bytes but its tables use "
                                f"{needed}: {_DAMAGED_HINT}")

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
            with contextlib.suppress(duckdb.Error):  # a failed checkpoint (disk full) keeps the rows in the WAL
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

    def _install_views(self, temporary: bool = False) -> None:
        """(Re)create the views shipped in sql/views/, in file-name order; ``temporary``: as this connection's
        temporary views (a read-only reader of a store whose stored views an older release wrote sees this
        release's, which shadow them). Skipped when the stored views are this release's already: each view
        created here carries a stamp (its comment) of the view files and the schema version, which a release
        that recreates a view clears (recreating ~25 views took about half of an open, and a checkpoint at close)."""
        texts = _view_texts()
        stamp = _views_stamp(texts, self.scalar("SELECT max(version) FROM schema_migrations"))
        names = {name for text in texts for name in _VIEW_NAME.findall(text)}
        stamped = {name for name, comment in self.conn.execute(
            "SELECT view_name, comment FROM duckdb_views() WHERE database_name = current_database() "
            "AND schema_name = 'main' AND NOT temporary").fetchall() if comment == stamp}
        if names <= stamped:
            return
        for text in texts:
            if temporary:
                text = re.sub(r"CREATE\s+OR\s+REPLACE\s+VIEW", "CREATE OR REPLACE TEMP VIEW", text, flags=re.I)
            self.conn.execute(text)
        if not temporary:
            for name in sorted(names):
                self.conn.execute(f"COMMENT ON VIEW {name} IS '{stamp}'")

    def lock_down(self) -> None:
        """For user SQL (``pmdb sql``) on a read-only connection: no file or network access (COPY, ATTACH,
        EXPORT, read_text/read_csv of files, extensions) and no configuration changes (SET, PRAGMA, RESET) from
        here on; queries over the store's tables and views keep working."""
        if not self.read_only:
            raise PmdbError("only a read-only store connection can be locked down")
        self.conn.execute("SET enable_external_access = false")
        self.conn.execute("SET lock_configuration = true")

    # ---- queries and writes ------------------------------------------------------------------------------
    def query(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> pd.DataFrame:
        return self.conn.execute(sql, params).df() if params is not None else self.conn.execute(sql).df()

    def rows(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Rows:
        """The result as plain Python rows, without pandas (:class:`pmdb.rows.Rows`); TypeError when a column is of
        a type Rows does not hold (lists, dates, intervals, ...: use :meth:`query` or :meth:`table`)."""
        return Rows.of(self.conn.execute(sql, params) if params is not None else self.conn.execute(sql))

    def table(self, sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None, *,
              most: int = PLAIN_ROWS) -> Rows | pd.DataFrame:
        """The result as :class:`pmdb.rows.Rows` when every column's type is held as plain values and it has at
        most ``most`` rows, else as the DataFrame :meth:`query` gives (a larger result runs the query again: past
        that many rows pandas' columnar copy costs less than a Python tuple per row)."""
        result = self.conn.execute(sql, params) if params is not None else self.conn.execute(sql)
        if not plain(result.description):
            return result.df()
        rows = result.fetchmany(most + 1)
        return Rows.of(result, rows) if len(rows) <= most else self.query(sql, params)

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """The first column of the first row (None without rows). The whole result is fetched, so that no result
        stays open on the connection (a pending one made a later ``register()`` fail)."""
        rows = self.conn.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction; nested blocks join the outer one (all or nothing)."""
        if self._in_transaction:
            yield
            return
        self.conn.execute("BEGIN TRANSACTION")
        self._in_transaction = True
        try:
            yield
            self.conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.Error):  # a failed COMMIT has already ended the transaction
                self.conn.execute("ROLLBACK")
            raise
        finally:
            self._in_transaction = False

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
        import pandas as pd

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

    def resolve_run_id(self, text: str) -> str:
        """The id of the run ``text`` names: itself when a run has that id, else the one run whose id starts with
        it (at least :data:`RUN_PREFIX_MIN` characters; `pmdb runs` shows :data:`RUN_ID_SHOWN`); ``text`` unchanged
        when none does (the caller says the run is unknown). A prefix of several runs is a one-line error."""
        if len(text) < RUN_PREFIX_MIN or self.scalar("SELECT count(*) FROM collection_runs WHERE run_id = ?", [text]):
            return text
        found = [row[0] for row in self.conn.execute(
            "SELECT run_id FROM collection_runs WHERE starts_with(run_id, ?) ORDER BY run_id LIMIT 2", [text]).fetchall()]
        if len(found) > 1:
            raise PmdbError(f"run id {text!r} is the start of several runs ({found[0]}, {found[1]}, ...): give more "
                            f"of it (`pmdb runs --format csv` lists whole ids)")
        return found[0] if found else text

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
    def stale_runs(self) -> list[str]:
        """'running' runs whose process is gone (another host, a dead pid, or this very process)."""
        host = socket.gethostname()
        return [run_id for run_id, pid, run_host in self.conn.execute(
            "SELECT run_id, pid, hostname FROM collection_runs WHERE status = 'running'").fetchall()
            if run_host != host or not _pid_alive(pid) or pid == os.getpid()]

    def mark_stale_runs(self) -> int:
        """Mark 'running' runs whose process is gone as 'interrupted'. Returns how many were marked."""
        stale = self.stale_runs()
        for run_id in stale:
            self.conn.execute(
                "UPDATE collection_runs SET status = 'interrupted', finished_at = current_timestamp, "
                f"error = coalesce(error, '{_STALE_ERROR}') WHERE run_id = ?", [run_id])
        return len(stale)

    def _show_stale_runs(self) -> None:
        """For a reader (who may not write): a temporary view shadows collection_runs showing stale runs as
        'interrupted', so readers and the views built on it agree with what the next writer will record."""
        stale = self.stale_runs()
        if not stale:
            return
        database = self.conn.execute("SELECT current_database()").fetchone()[0].replace('"', '""')
        ids = ", ".join("'" + run_id.replace("'", "''") + "'" for run_id in stale)
        self.conn.execute(
            f"CREATE OR REPLACE TEMP VIEW collection_runs AS SELECT * REPLACE ("
            f"CASE WHEN run_id IN ({ids}) THEN 'interrupted' ELSE status END AS status, "
            f"CASE WHEN run_id IN ({ids}) THEN coalesce(error, '{_STALE_ERROR}') ELSE error END AS error) "
            f'FROM "{database}".main.collection_runs')

    def rows_of_run(self, run_id: str) -> int:
        """Rows every table holds for this run (its collection_runs row not counted)."""
        tables = [t for (t,) in self.conn.execute(
            "SELECT DISTINCT c.table_name FROM information_schema.columns c JOIN information_schema.tables t "
            "USING (table_schema, table_name) WHERE c.column_name = 'run_id' AND t.table_type = 'BASE TABLE' "
            "AND c.table_name <> 'collection_runs'").fetchall()]
        if not tables:
            return 0
        sql = " + ".join(f'(SELECT count(*) FROM "{t}" WHERE run_id = $1)' for t in tables)
        return int(self.conn.execute(f"SELECT {sql}", [run_id]).fetchone()[0])

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
        except KeyboardInterrupt as exc:
            kept = None
            with contextlib.suppress(duckdb.Error):
                run.finish("interrupted", "interrupted by the user (Ctrl-C or SIGTERM)")
                kept = self.rows_of_run(run.run_id)
            if isinstance(exc, RunInterrupted) or kept is None:
                raise
            message = (f"run {run.run_id} ({kind}) interrupted; it kept {kept} rows "
                       f"(they count once a re-run of the same command resumes it)")
            _interruptions.append(message)
            raise RunInterrupted(message) from exc
        except BaseException as exc:
            with contextlib.suppress(duckdb.Error):  # the disk may be full: the next writer marks it interrupted
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
    # writes that take effect only if the run completes, in the transaction that marks it completed (a fit's
    # champion moves: a fit killed, failed or interrupted before moves none)
    on_complete: list[Callable[[], None]] = field(default_factory=list)

    def finish(self, status: str, error: str | None = None) -> None:
        """Record the run's end; a completed run refreshes the op-coverage summary of the groups it wrote and runs
        its ``on_complete`` writes, in the same transaction (its rows count from that moment on; they see the run as
        completed, and what they add to ``summary`` is stored with it)."""
        with self.store.transaction():
            self.store.conn.execute(
                "UPDATE collection_runs SET status = ?, finished_at = current_timestamp, error = ? WHERE run_id = ?",
                [status, error, self.run_id])
            if status == "completed":
                op_coverage.refresh_for_run(self.store.conn, self.run_id)
                for write in self.on_complete:
                    write()
            self.store.conn.execute("UPDATE collection_runs SET summary = ? WHERE run_id = ?",
                                    [to_json(self.summary), self.run_id])


_STALE_ERROR = "the process ended before the run finished"
_VIEW_NAME = re.compile(r"CREATE\s+OR\s+REPLACE\s+VIEW\s+(\w+)", re.I)
_HEADER_BYTES = 3 * 4096  # DuckDB's file header and two database headers precede block 0
_DAMAGED_HINT = "restore it from a backup, or move it aside and start a new store with `pmdb init`"
_DAMAGE_WORDS = ("corrupt", "checksum", "could not read", "serializ", "internal error", "invalid block",
                 "database has been invalidated")


def _view_texts() -> list[str]:
    """The SQL of sql/views/*.sql, in file-name order."""
    views = sorted((e for e in resources.files("pmdb.sql").joinpath("views").iterdir() if e.name.endswith(".sql")),
                   key=lambda e: e.name)
    return [entry.read_text() for entry in views]


def _views_stamp(texts: list[str], schema_version: int | None) -> str:
    """What the stored views of this release carry as their comment: a hash of the view files and the schema
    version they were created on (a migration may change a table a view reads)."""
    import hashlib

    digest = hashlib.sha256("\0".join([*texts, str(schema_version)]).encode()).hexdigest()[:16]
    return f"pmdb views {digest}"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0][:300] if lines else ""


def _looks_damaged(text: str) -> bool:
    return any(word in text.lower() for word in _DAMAGE_WORDS)


def failure_message(exc: BaseException) -> str | None:
    """One line for a DuckDB error that escaped a command (a damaged store, a full disk), else None."""
    if not isinstance(exc, duckdb.Error):
        return None
    text = str(exc)
    if _looks_damaged(text):
        return f"the store failed ({_first_line(text)}): it may be damaged: {_DAMAGED_HINT}"
    if "no space" in text.lower() or "too large" in text.lower():
        return f"writing to the store failed ({_first_line(text)}): free disk space, then re-run"
    return f"the store failed: {_first_line(text)}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]


def _holder_path(workspace: Workspace) -> Path:
    return workspace.db_path.with_name(workspace.db_path.name + ".holder")


def _lock_message(workspace: Workspace, read_only: bool = False) -> str:
    try:
        note = json.loads(_holder_path(workspace).read_text())
        who = f"`{note['command']}` (pid {note['pid']}, since {note['since']})"
    except (OSError, ValueError, KeyError):
        who = "another process"
    if read_only:
        return (f"the store {workspace.db_path} is in use by {who}, which writes to it; readers share the store "
                f"with each other but not with a writer: wait for it to finish or stop it, then retry")
    return (f"the store {workspace.db_path} is in use by {who}; DuckDB allows one writer at a time "
            f"(and no readers while it writes): wait for it to finish or stop it, then retry")
