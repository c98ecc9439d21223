"""`pmdb doctor` on real workspaces: all ok (exit 0, nothing written), a run left 'running' by a process that died
(found read-only, marked interrupted by --repair with its rows kept), a damaged write-ahead log (the printed `mv`
command fixes it), garbage inside a table (named). Every line fits 80 columns; never a traceback."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap

from .conftest import query, run_pmdb

CHECKS = ["store", "wal", "migrations", "tables", "runs", "temporary", "registry", "unmirrored", "champions", "files"]

_DIE_IN_A_RUN = textwrap.dedent("""
    import os, sys
    from pmdb.config import Workspace
    from pmdb.store import Store
    store = Store.open(Workspace(sys.argv[1]))
    platform = store.scalar("SELECT name FROM platforms LIMIT 1")
    run = store.start_run("peaks", platform, command="test: dies in a run")
    store.insert("platform_peaks", [{"platform": platform, "run_id": run.run_id, "metric": "mem_bw",
                                     "dtype": "float32", "value": 1e9 + i} for i in range(3)])
    print(run.run_id)
    sys.stdout.flush()
    os._exit(0)  # like kill -9 in the middle of a run
""")

_FILL_AND_DIE = textwrap.dedent("""
    import os, sys, duckdb
    conn = duckdb.connect(sys.argv[1])
    conn.execute("PRAGMA disable_checkpoint_on_shutdown")
    conn.execute("CREATE TABLE scratch AS SELECT range AS i, md5(range::VARCHAR) AS s FROM range(200000)")
    conn.execute("CHECKPOINT")
    conn.execute("INSERT INTO scratch SELECT range, 'wal' FROM range(1000)")
    os._exit(0)  # the last writes live only in the WAL
""")


def doctor(home, *args: str) -> tuple[int, list[str]]:
    done = run_pmdb(home, "doctor", *args)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines if not line.lstrip().startswith("fix:")), done.stdout
    return done.returncode, lines


def check(lines: list[str], name: str) -> str:
    return next(line for line in lines if line[8:].split(" ")[0] == name)


def fixes(lines: list[str]) -> list[str]:
    return [line.strip()[len("fix: "):] for line in lines if line.lstrip().startswith("fix: ")]


def test_a_healthy_workspace_is_all_ok_and_nothing_is_written(home):
    before = (home / "pmdb.duckdb").stat().st_mtime_ns
    code, lines = doctor(home)
    assert code == 0, lines
    assert [line[8:].split(" ")[0] for line in lines] == CHECKS
    assert all(line.startswith("ok ") for line in lines)
    assert "no versions" in check(lines, "registry") or "all 0" in check(lines, "registry")
    assert (home / "pmdb.duckdb").stat().st_mtime_ns == before
    assert not (home / "mlflow.db").exists()  # checking the registry does not create it


def test_a_run_left_running_is_found_read_only_and_repair_keeps_its_rows(home):
    child = subprocess.run([sys.executable, "-c", _DIE_IN_A_RUN, str(home)], capture_output=True, text=True,
                           check=True)
    run_id = child.stdout.strip()
    code, lines = doctor(home)
    assert code == 1
    assert check(lines, "runs").startswith("problem") and "1 left 'running'" in check(lines, "runs")
    assert fixes(lines) == [f"pmdb --home {home} doctor --repair"]
    assert query(home, "SELECT status FROM collection_runs WHERE run_id = ?", [run_id]) == [("running",)]

    code, lines = doctor(home, "--repair")
    assert code == 0, lines
    assert lines[0] == "repaired: marked 1 stale runs interrupted (their rows are kept)"
    assert query(home, "SELECT status FROM collection_runs WHERE run_id = ?", [run_id]) == [("interrupted",)]
    assert query(home, "SELECT count(*) FROM platform_peaks WHERE run_id = ?", [run_id]) == [(3,)]


def test_a_damaged_wal_gets_the_exact_mv_command_and_it_works(home):
    subprocess.run([sys.executable, "-c", _FILL_AND_DIE, str(home / "pmdb.duckdb")], check=True)
    wal = home / "pmdb.duckdb.wal"
    with open(wal, "r+b") as fh:
        fh.seek(wal.stat().st_size // 3)
        fh.write(os.urandom(256))
    code, lines = doctor(home)
    assert code == 1
    assert lines[0].startswith("problem store") and "write-ahead log is damaged" in lines[0]
    assert check(lines, "wal").startswith("problem")
    (fix,) = fixes(lines)
    assert fix == f"mv {wal} {wal}.damaged"
    subprocess.run(shlex.split(fix), check=True)
    code, lines = doctor(home)
    assert code == 0, lines


def test_garbage_inside_a_table_is_named_and_the_rest_reads(home):
    subprocess.run([sys.executable, "-c", _FILL_AND_DIE, str(home / "pmdb.duckdb")], check=True)
    assert run_pmdb(home, "status").returncode == 0  # replays and checkpoints the WAL
    (block, block_size), = query(home, "SELECT min(block_id), any_value(d.block_size) FROM "
                                       "pragma_storage_info('scratch'), pragma_database_size() d WHERE persistent "
                                       "AND block_id >= 0 AND column_name = 's'")
    with open(home / "pmdb.duckdb", "r+b") as fh:
        fh.seek(3 * 4096 + block * block_size + 64)
        fh.write(os.urandom(block_size - 128))
    code, lines = doctor(home)
    assert code == 1
    assert check(lines, "store").startswith("ok")
    assert check(lines, "tables").startswith("problem") and check(lines, "tables").endswith("unreadable: scratch")
    assert check(lines, "runs").startswith("ok") and check(lines, "registry").startswith("ok")
    assert fixes(lines) == [f"restore {home / 'pmdb.duckdb'} from a backup (the other tables read in full)"]
