"""Health checks of a workspace's store for ``pmdb doctor``: it opens read-only (without migrating), its write-ahead
log, applied migrations, every table readable (count and a full scan of every column), runs left 'running' by
processes that ended. Each check is one :class:`Check`; nothing here writes."""
from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import duckdb

from pmdb import migrator
from pmdb.config import Workspace, resolve_workspace
from pmdb.errors import PmdbError
from pmdb.store import Store, failure_message


@dataclass(frozen=True)
class Check:
    """One line of ``pmdb doctor``: a named check, whether it passed, what was found, and for a problem the exact
    command (or step) that fixes it; ``repairable``: ``pmdb doctor --repair`` fixes it without losing anything."""

    name: str
    ok: bool
    text: str
    fix: str | None = None
    repairable: bool = False


def pmdb_command(workspace: Workspace, args: str) -> str:
    """``pmdb ARGS`` as the user types it for this workspace (``--home`` when the default would pick another)."""
    if resolve_workspace(None).home == workspace.home:
        return f"pmdb {args}"
    return f"pmdb --home {workspace.home} {args}"


def _wal(workspace: Workspace) -> Path:
    return workspace.db_path.with_name(workspace.db_path.name + ".wal")


def _size(nbytes: float) -> str:
    """A file size for people: 950 B, 6.3 MB."""
    for unit in ("B", "kB", "MB"):
        if nbytes < 1000:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1000
    return f"{nbytes:.1f} GB"


@contextlib.contextmanager
def open_read_only(workspace: Workspace) -> Iterator[tuple[Store | None, list[Check]]]:
    """The store opened read-only as it is (pending migrations are not applied, stale runs not marked) and the
    checks of the file and its write-ahead log; the store is None when it did not open (the checks say why and what
    to do)."""
    workspace.require()
    path, wal = workspace.db_path, _wal(workspace)
    try:
        conn = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        yield None, _open_failure(workspace)
        return
    store = Store(workspace, conn, read_only=True)
    if wal.exists():
        wal_check = Check("wal", True, f"{wal.name} ({_size(wal.stat().st_size)}) replays: writes not yet "
                                       f"checkpointed, kept")
    else:
        wal_check = Check("wal", True, "none: every write is checkpointed")
    try:
        yield store, [Check("store", True, f"{path.name} opens read-only ({_size(path.stat().st_size)})"), wal_check]
    finally:
        with contextlib.suppress(duckdb.Error):
            conn.close()


def _open_failure(workspace: Workspace) -> list[Check]:
    """The checks of a store that does not open, from pmdb's own message for it (a writer holds it, a damaged
    write-ahead log, a damaged file) given by the ordinary read-only open."""
    try:
        Store.open(workspace, read_only=True).close()
    except PmdbError as exc:
        text = str(exc)
    except duckdb.Error as exc:
        text = failure_message(exc) or str(exc)
    else:
        return [Check("store", False, "opened only at the second attempt (a writer was starting?)",
                      pmdb_command(workspace, "doctor"))]
    if "`mv " in text and "write-ahead log" in text:
        command = text.split("`mv ", 1)[1].split("`", 1)[0]
        return [Check("store", False, "does not open: its write-ahead log is damaged"),
                Check("wal", False, "damaged; moved aside, the writes since the last checkpoint are lost",
                      f"mv {command}")]
    if "in use by" in text:
        found = re.search(r"in use by (`[^`]*`)(?: \(pid (\d+))?", text)
        who = "another process" if found is None else found.group(1) + (f" (pid {found.group(2)})"
                                                                       if found.group(2) else "")
        return [Check("store", False, f"does not open: in use by {who}", "wait for it to finish, then retry")]
    head, _, advice = text.rpartition(": ")
    return [Check("store", False, f"does not open: {head}", advice)]


def check_opened(store: Store) -> tuple[list[Check], list[str]]:
    """The checks of a store that opened: migrations, tables, runs, temporary files; and the ids of stale runs."""
    runs, stale = check_runs(store)
    return [check_migrations(store), check_tables(store), runs, check_temporary(store)], stale


TMP_GRACE_S = 600  # an entry of artifacts/tmp younger than this may belong to a command starting (not yet a run)


def orphans(store: Store) -> list[Path]:
    """Entries of ``artifacts/tmp`` no command in progress owns: named after a run that is not running (ended,
    failed, killed) or after none, and untouched for TMP_GRACE_S seconds (a run's rank logs and raw traces, a
    capture's or a merge's scratch files that a killed process left)."""
    tmp = store.workspace.artifacts / "tmp"
    if not tmp.is_dir():
        return []
    stale = set(store.stale_runs())
    running = {r for (r,) in store.conn.execute(
        "SELECT run_id FROM collection_runs WHERE status = 'running'").fetchall()} - stale
    now = time.time()
    found = []
    for entry in sorted(tmp.iterdir()):
        if entry.name in running:
            continue
        known_run = store.scalar("SELECT count(*) FROM collection_runs WHERE run_id = ?", [entry.name])
        with contextlib.suppress(OSError):
            if known_run or now - _newest_mtime(entry) > TMP_GRACE_S:
                found.append(entry)
    return found


def _newest_mtime(entry: Path) -> float:
    """The latest modification time of a file or of anything in a folder (s since the epoch)."""
    times = [entry.stat().st_mtime] + [p.stat().st_mtime for p in entry.rglob("*")] if entry.is_dir() else \
        [entry.stat().st_mtime]
    return max(times)


def _tree_bytes(entry: Path) -> int:
    if entry.is_file():
        return entry.stat().st_size
    return sum(p.stat().st_size for p in entry.rglob("*") if p.is_file())


def check_temporary(store: Store) -> Check:
    """Temporary files left under artifacts/tmp by runs that ended (a failed or killed run's traces and logs)."""
    found = orphans(store)
    if not found:
        return Check("temporary", True, "no files left in artifacts/tmp by runs that ended")
    size = 0
    with contextlib.suppress(OSError):
        size = sum(_tree_bytes(e) for e in found)
    return Check("temporary", False, f"{len(found)} left in artifacts/tmp by runs that ended ({_size(size)})",
                 pmdb_command(store.workspace, "doctor --repair"), repairable=True)


def check_migrations(store: Store) -> Check:
    """Every migration this pmdb knows is applied, none edited, none newer."""
    known = migrator.available()
    try:
        pending = migrator.check(store.conn, known)
    except PmdbError as exc:
        return Check("migrations", False, str(exc)[:300], "use the pmdb version that wrote this store")
    if pending:
        names = ", ".join(m.name for m in pending)
        return Check("migrations", False, f"{len(pending)} of {len(known)} pending ({names})",
                     pmdb_command(store.workspace, "doctor --repair"), repairable=True)
    return Check("migrations", True, f"all {len(known)} applied")


def check_tables(store: Store) -> Check:
    """Every base table: ``count(*)`` and a scan hashing every value of every column (a damaged block fails)."""
    tables = [t for (t,) in store.conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND NOT temporary "
        "ORDER BY table_name").fetchall()]
    start, rows, bad = time.monotonic(), 0, []
    for table in tables:
        quoted = '"' + table.replace('"', '""') + '"'
        try:
            rows += int(store.conn.execute(f"SELECT count(*) FROM {quoted}").fetchone()[0])
            store.conn.execute(f"SELECT bit_xor(hash(COLUMNS(*))) FROM {quoted}").fetchall()
        except duckdb.Error:
            bad.append(table)
    seconds = time.monotonic() - start
    if bad:
        return Check("tables", False, f"{len(bad)} of {len(tables)} unreadable: {', '.join(bad)}",
                     f"restore {store.workspace.db_path} from a backup (the other tables read in full)")
    return Check("tables", True, f"{len(tables)} tables, {rows:,} rows, all read in full ({seconds:.1f} s)")


def check_runs(store: Store) -> tuple[Check, list[str]]:
    """Runs still 'running' whose process has ended (and their ids)."""
    stale = store.stale_runs()
    if stale:
        return (Check("runs", False, f"{len(stale)} left 'running' by processes that ended",
                      pmdb_command(store.workspace, "doctor --repair"), repairable=True), stale)
    running = store.scalar("SELECT count(*) FROM collection_runs WHERE status = 'running'")
    alive = f" ({running} running now)" if running else ""
    return Check("runs", True, f"none left 'running' by a process that ended{alive}"), stale
