"""`pmdb sql` reads the store and nothing else (issue #38, item 4): a real `pmdb` process cannot overwrite the store
with COPY TO, write or read any other file, attach a database or change a setting; each is refused in one line
with exit 2 and leaves the store byte for byte as it was. Named queries and the views keep working."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tests.faults.conftest import run_pmdb


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """One workspace for the module (`pmdb init`): nothing here may change it."""
    ws = tmp_path_factory.mktemp("sql_read_only") / "ws"
    done = run_pmdb(ws, "init")
    assert done.returncode == 0, done.stderr
    return ws


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("statement", [
    "COPY (select 1) TO '{db}' (FORMAT csv)",
    "COPY (select 1) TO '{out}' (FORMAT csv)",
    "select * from read_text('/etc/hostname')",
    "select * from read_csv('/etc/passwd')",
    "ATTACH '{out}' AS other",
    "EXPORT DATABASE '{dir}'",
    "SET enable_external_access = true",
    "SET lock_configuration = false",
    "PRAGMA threads = 1",
    "select 1; COPY (select 1) TO '{out}'",
    "INSTALL httpfs",
])
def test_sql_refuses_file_access_and_settings(home, tmp_path, statement):
    db = home / "pmdb.duckdb"
    before = _digest(db)
    out = tmp_path / "written.csv"
    done = run_pmdb(home, "sql", statement.format(db=db, out=out, dir=tmp_path / "export"))
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pmdb: error: `pmdb sql` only reads the store"), done.stderr
    assert "Traceback" not in done.stderr
    assert _digest(db) == before and db.stat().st_size > 4096
    assert not out.exists() and not (tmp_path / "export").exists()


def test_queries_views_and_named_queries_still_work(home, tmp_path):
    done = run_pmdb(home, "sql", "SELECT count(*) AS n FROM v_prediction_errors", "--format", "csv")
    assert done.returncode == 0 and done.stdout.splitlines() == ["n", "0"], done.stderr
    help_text = run_pmdb(home, "sql", "--help").stdout
    assert "Read-only" in help_text and "COPY" in help_text
    assert run_pmdb(home, "sql", "--query", "prediction_vs_baseline").returncode == 0
    written = run_pmdb(home, "sql", "SELECT version FROM schema_migrations", "-o", str(tmp_path / "p.csv"))
    assert written.returncode == 0 and (tmp_path / "p.csv").read_text().startswith("version"), written.stderr
