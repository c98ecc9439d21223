"""Schema migrations: numbered ``migrations/NNNN_name.sql`` files applied in order, each in one transaction,
recorded in ``schema_migrations`` with a checksum. Newer or edited schemas are refused."""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import duckdb

from pmdb.errors import PmdbError

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_BOOKKEEPING = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,   -- NNNN of the migration file
    name       VARCHAR NOT NULL,      -- file name
    checksum   VARCHAR NOT NULL,      -- sha256 of the file content when applied
    applied_at TIMESTAMP NOT NULL DEFAULT current_timestamp
)"""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available(package: str = "pmdb.migrations") -> list[Migration]:
    """Migrations shipped with this pmdb, in version order."""
    found = []
    for entry in resources.files(package).iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"migration numbers must run 1..N without gaps, found {versions}")
    return found


def applied(conn: duckdb.DuckDBPyConnection) -> dict[int, tuple[str, str]]:
    """version -> (name, checksum) of what the store has applied (empty for a new store)."""
    exists = conn.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'").fetchone()[0]
    if not exists:
        return {}
    return {v: (n, c) for v, n, c in conn.execute("SELECT version, name, checksum FROM schema_migrations").fetchall()}


def check(conn: duckdb.DuckDBPyConnection, known: list[Migration]) -> list[Migration]:
    """Refuse newer or edited schemas; return the migrations still to apply."""
    done = applied(conn)
    by_version = {m.version: m for m in known}
    newest_known = max(by_version, default=0)
    newer = [v for v in done if v > newest_known]
    if newer:
        raise PmdbError(f"the store has schema version {max(newer)} but this pmdb knows only up to {newest_known}: "
                        f"upgrade pmdb to use this workspace")
    for version, (name, checksum) in sorted(done.items()):
        if by_version[version].checksum != checksum:
            raise PmdbError(f"migration {name} was edited after it was applied to this store (checksum differs): "
                            f"restore the original file; add a new migration instead of editing an applied one")
    return [m for m in known if m.version not in done]


def migrate(conn: duckdb.DuckDBPyConnection, known: list[Migration] | None = None) -> list[Migration]:
    """Apply pending migrations, each in its own transaction. Returns what was applied."""
    known = available() if known is None else known
    conn.execute(_BOOKKEEPING)
    pending = check(conn, known)
    for migration in pending:
        conn.execute("BEGIN TRANSACTION")
        try:
            conn.execute(migration.sql)
            conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (?, ?, ?)",
                         [migration.version, migration.name, migration.checksum])
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise
    return pending


def current_version(conn: duckdb.DuckDBPyConnection) -> int:
    return max(applied(conn), default=0)
