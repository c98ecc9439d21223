"""Disk full during `pmdb collect trace` (a real child under RLIMIT_FSIZE): whether the trace file's gzipped copy
or the store's write-ahead log hits the limit, the run fails with one line and exit 1, the store keeps nothing of
it and stays readable, no partial file is left, and the same import succeeds once there is room."""
from __future__ import annotations

import json
import random
import resource
from pathlib import Path

import pytest

from harness import in_process
from .conftest import Child, query


def _kineto(path: Path) -> Path:
    """A CPU Kineto trace of three marked iterations of 4000 ops each: about 1.7 MB, 230 kB gzipped."""
    rng = random.Random(0)
    events, t = [], 0.0
    for n in range(1, 4):
        start = t
        for _ in range(4000):
            dur = round(rng.uniform(1, 50), 3)
            events.append({"ph": "X", "cat": "cpu_op", "name": f"aten::op{rng.randrange(500)}", "pid": 1, "tid": 1,
                           "ts": round(t, 3), "dur": dur,
                           "args": {"Input Dims": [[rng.randrange(1, 4096), rng.randrange(1, 4096)]]}})
            t += dur + rng.uniform(1, 5)
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{n}", "pid": 1, "tid": 1,
                       "ts": start - 0.5, "dur": t - start + 0.5, "args": {}})
    path.write_text(json.dumps({"schemaVersion": 1, "deviceProperties": [], "host_name": "elsewhere",
                                "traceEvents": events}))
    return path


# 100 kB: the gzipped copy of the trace (230 kB) cannot be written; 600 kB: it can, the log of its rows cannot
@pytest.mark.slow
@pytest.mark.parametrize("limit, where", [(100_000, ".json.gz"), (600_000, "pmdb.duckdb.wal")])
def test_disk_full_during_collect_trace_is_one_line_and_keeps_nothing(home, tmp_path, limit, where):
    trace = _kineto(tmp_path / "kineto.json")
    args = ["--home", str(home), "collect", "trace", "--kineto", str(trace), "--platform", "elsewhere"]

    def _limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    code, _, err = Child(args, preexec_fn=_limit).finish()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and "Traceback" not in err, err
    assert len(lines) == 1, err
    assert lines[0].startswith("pmdb: error: run ") and "(trace) failed" in lines[0], lines[0]
    assert "File too large" in lines[0] and where in lines[0] and "nothing of it was kept" in lines[0]
    (status,), = query(home, "SELECT status FROM collection_runs WHERE kind = 'trace'")
    assert status in ("failed", "running")  # 'running' when even the status change found no room: seen as dead
    for table in ("trace_sets", "traces", "trace_ops", "trace_iterations", "imported_files"):
        assert query(home, f"SELECT count(*) FROM {table}") == [(0,)], table
    assert not [p for p in (home / "artifacts" / "traces").glob("*") if ".tmp" in p.name]

    again = in_process(home, "collect", "trace", "--kineto", str(trace), "--platform", "elsewhere")  # here: the re-run
    assert again.returncode == 0, again.stderr
    assert query(home, "SELECT count(*), min(measured_us) > 0 FROM v_trace_sets") == [(1, True)]
