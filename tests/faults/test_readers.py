"""Readers share the store (real processes holding it open); a reader refused during a write is told why."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from .conftest import last_line, run_pmdb

_HOLD = textwrap.dedent("""
    import sys, time
    from pmdb.config import Workspace
    from pmdb.store import Store
    store = Store.open(Workspace(sys.argv[1]), read_only=sys.argv[2] == "reader")
    print("open", flush=True)
    time.sleep(60)
""")


def _holder(home, mode: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, str(home), mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "open"
    return proc


def test_two_readers_at_once_and_a_writer_is_refused_clearly(home):
    reader = _holder(home, "reader")
    try:
        for args in (["sql", "SELECT count(*) AS n FROM collection_runs"], ["status"], ["runs"]):
            done = run_pmdb(home, *args)
            assert done.returncode == 0, done.stderr
        writer = run_pmdb(home, "platform")
        assert writer.returncode == 2 and "Traceback" not in writer.stderr
        assert last_line(writer.stderr).startswith("pmdb: error: the store") and "no readers" in writer.stderr
    finally:
        reader.kill()
        reader.wait()


def test_reader_during_a_write_is_told_one_line(home):
    writer = _holder(home, "writer")
    try:
        done = run_pmdb(home, "sql", "SELECT 1")
        assert done.returncode == 2 and "Traceback" not in done.stderr
        line = last_line(done.stderr)
        assert line.startswith("pmdb: error: the store") and "which writes to it" in line and "readers share" in line
    finally:
        writer.kill()
        writer.wait()
