"""Real damaged files: a store cut to half, garbage written inside it, a corrupt WAL. Every command refuses with
one line saying what to do (never a traceback, never exit 0 on a store it cannot read)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import last_line, query, run_pmdb

_FILL_AND_DIE = textwrap.dedent("""
    import os, sys, duckdb
    conn = duckdb.connect(sys.argv[1])
    conn.execute("PRAGMA disable_checkpoint_on_shutdown")
    conn.execute("CREATE TABLE scratch AS SELECT range AS i, md5(range::VARCHAR) AS s FROM range(200000)")
    conn.execute("CHECKPOINT")
    conn.execute("UPDATE collection_runs SET error = 'logged only in the WAL'")
    conn.execute("INSERT INTO scratch SELECT range, 'wal' FROM range(1000)")
    os._exit(0)  # like kill -9: the last writes live only in the WAL
""")


@pytest.fixture
def filled(home):
    """The workspace with a checkpointed table of ~200k rows and writes left in a WAL by a process that died."""
    db = home / "pmdb.duckdb"
    subprocess.run([sys.executable, "-c", _FILL_AND_DIE, str(db)], check=True)
    assert (home / "pmdb.duckdb.wal").exists()
    return home


def _refused(home, *args: str) -> str:
    done = run_pmdb(home, *args)
    assert done.returncode != 0, (args, done.stdout)
    assert "Traceback" not in done.stderr, done.stderr
    line = last_line(done.stderr)
    assert line.startswith("pmdb: error: "), done.stderr
    return line


def test_corrupt_wal_is_refused_with_what_to_do_and_moving_it_aside_recovers(filled):
    wal = filled / "pmdb.duckdb.wal"
    with open(wal, "r+b") as fh:
        fh.seek(wal.stat().st_size // 3)
        fh.write(os.urandom(256))
    for args in (["init"], ["status"], ["runs"], ["sql", "SELECT 1"]):
        line = _refused(filled, *args)
        assert "write-ahead log" in line and "move it aside" in line
    wal.rename(wal.with_name("pmdb.duckdb.wal.damaged"))
    done = run_pmdb(filled, "status")
    assert done.returncode == 0, done.stderr


def test_store_cut_to_half_is_refused(filled):
    assert run_pmdb(filled, "status").returncode == 0  # replays and checkpoints the WAL: a whole store
    db = filled / "pmdb.duckdb"
    os.truncate(db, db.stat().st_size // 2 // 4096 * 4096)
    for args in (["status"], ["runs"], ["sql", "SELECT count(*) FROM scratch"], ["platform"],
                 ["collect", "ops", "--op", "relu", "--sweep", "quick", "--no-peaks"]):
        line = _refused(filled, *args)
        assert "damaged" in line and ("backup" in line or "pmdb init" in line)


def test_garbage_inside_the_store_never_gives_a_traceback(filled):
    assert run_pmdb(filled, "status").returncode == 0
    db = filled / "pmdb.duckdb"
    (block, block_size), = query(filled, "SELECT min(block_id), any_value(d.block_size) FROM "
                                         "pragma_storage_info('scratch'), pragma_database_size() d WHERE persistent "
                                         "AND block_id >= 0 AND column_name = 's'")
    with open(db, "r+b") as fh:  # random bytes over a block of the scratch table
        fh.seek(3 * 4096 + block * block_size + 64)
        fh.write(os.urandom(block_size - 128))
    for args in (["status"], ["runs"]):
        assert run_pmdb(filled, *args).returncode == 0  # their tables are intact
    line = _refused(filled, "sql", "SELECT count(DISTINCT s) FROM scratch")
    assert "damaged" in line or "checksum" in line.lower()
