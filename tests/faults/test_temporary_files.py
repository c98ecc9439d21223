"""Temporary files (issue #38, item 6): a `pmdb collect workload` that fails on a full disk (a real child under
RLIMIT_FSIZE, after its rank wrote the raw traces) leaves nothing in artifacts/tmp; what a killed run left there is
reported by `pmdb doctor` and removed by `pmdb doctor --repair`, and nothing a running command owns is touched."""
from __future__ import annotations

import os
import resource
import time

import pytest

from harness import in_process
from .conftest import Child, query

# Any file may grow to 300 KiB: the store file is already larger (no checkpoint fits), the rank's raw execution
# trace (about 280 kB) fits, and the write-ahead log, filled first by stored tasks, overflows while the traces are
# stored.
LIMIT = 300 * 1024


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.slow
def test_a_workload_run_failing_on_a_full_disk_leaves_no_temporary_files(home):
    filled = Child(["--home", str(home), "collect", "tasks", "--count", "60", "--world-size", "2"],
                   preexec_fn=_limit_file_size)
    assert filled.finish()[0] == 0
    args = ["--home", str(home), "collect", "workload", "dlrm", "--iters", "3", "--warmup", "1", "--trace-iters", "1"]
    code, _, err = Child(args, preexec_fn=_limit_file_size).finish()
    assert code == 1 and "Traceback" not in err and "File too large" in err, err
    assert query(home, "SELECT count(*) FROM collection_runs WHERE kind = 'workload' AND status = 'completed'") \
        == [(0,)]
    assert list((home / "artifacts" / "tmp").iterdir()) == []
    doctor = in_process(home, "doctor")   # a reader: in this process (a process start adds ~1.5 s, tests nothing)
    assert "ok      temporary" in doctor.stdout, doctor.stdout


def test_doctor_reports_and_repair_removes_what_ended_runs_left(home):
    tmp = home / "artifacts" / "tmp"
    left = tmp / "0123456789abcdef0123456789abcdef"       # a killed run's folder, untouched for an hour
    left.mkdir(parents=True)
    (left / "rank0.et.json").write_bytes(b"x" * 5000)
    old = time.time() - 3600
    for path in (left / "rank0.et.json", left):
        os.utime(path, (old, old))
    fresh = tmp / "graph-123"                              # a capture starting now: not an orphan yet
    fresh.mkdir()
    doctor = in_process(home, "doctor")
    assert doctor.returncode == 1
    assert "problem temporary  1 left in artifacts/tmp by runs that ended (5.0 kB)" in doctor.stdout, doctor.stdout
    assert "fix: pmdb --home" in doctor.stdout and "doctor --repair" in doctor.stdout
    repaired = in_process(home, "doctor", "--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "removed 1 entries of artifacts/tmp" in repaired.stdout
    assert not left.exists() and fresh.exists()
