"""Disk full during `pmdb collect ops` (a real child under RLIMIT_FSIZE): the run fails with one line and a
non-zero exit, the rows it committed are kept, and a re-run adopts them: no row lost, none counted twice."""
from __future__ import annotations

import json
import re
import resource
import time

import pytest

from pmdb.config import Workspace
from pmdb.store import Store

from harness import in_process
from .conftest import Child, last_line, query, quick_sweep_args

# Any file may grow to 110 kB: the store file is already larger (no checkpoint fits) and the WAL fills up after
# a batch or two of rows.
LIMIT = 110_000


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


@pytest.mark.slow
def test_disk_full_fails_the_run_keeps_committed_rows_and_resume_loses_none(home, record_property):
    child = Child([*quick_sweep_args(home), "--no-progress"], preexec_fn=_limit_file_size)
    code, out, err = child.finish()
    assert code == 1, err
    assert "Traceback" not in err
    line = last_line(err)
    assert line.startswith("pmdb: error: run ") and "failed" in line and "File too large" in line
    kept = int(re.search(r"its (\d+) rows written before are kept", line).group(1))
    (run_id, status), = query(home, "SELECT run_id, status FROM collection_runs WHERE kind = 'ops'")
    if status == "running":  # the disk was too full even for the status change: readers see the dead run as
        with Store.open(Workspace(home), read_only=True) as store:   # interrupted, the next writer records it
            status = store.scalar("SELECT status FROM collection_runs WHERE run_id = ?", [run_id])
    assert status in ("failed", "interrupted")  # never 'completed' with rows missing
    assert query(home, "SELECT count(*) FROM op_measurements WHERE run_id = ?", [run_id])[0][0] == kept
    assert query(home, "SELECT count(*) FROM v_op_measurements")[0][0] == 0  # a failed run counts nothing

    started = time.monotonic()
    again = in_process(home, *quick_sweep_args(home)[2:], "--no-progress")   # the re-run: in this process
    record_property("recover_s", round(time.monotonic() - started, 1))  # the re-run that resumes the sweep
    assert again.returncode == 0, again.stderr
    (new_id, summary), = query(home, "SELECT run_id, summary FROM collection_runs WHERE status = 'completed'")
    summary = json.loads(summary)
    assert summary["rows_resumed"] == kept
    assert summary["resumed_runs"] == ([run_id] if kept else [])
    assert query(home, "SELECT count(*) FROM op_measurements WHERE run_id = ?", [run_id])[0][0] == 0
    # nothing lost, nothing twice: every (config, cache state) of the sweep exactly once, in the completed run
    total, distinct = query(home, "SELECT count(*), count(DISTINCT (config_key, cache_state)) FROM v_op_measurements")[0]
    assert total == distinct == kept + summary["rows_written"] == 384
    record_property("rows_kept", kept)
    record_property("rows_lost", kept - summary["rows_resumed"])
