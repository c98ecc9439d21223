"""Ctrl-C (a real SIGINT), SIGTERM and kill -9 of a real `pmdb collect ops` child: one line saying what was kept, readers
see the killed run as interrupted, and a re-run resumes (adopts) the finished configs instead of measuring again."""
from __future__ import annotations

import json
import signal
import time

import pytest

from harness import in_process
from .conftest import Child, last_line, query, quick_sweep_args


def _resume_adopts(home, interrupted_id: str, kept: int, record_property) -> None:
    """The re-run, in this process (:func:`harness.in_process`): the signal went to the child, a re-run is any later
    pmdb; a process of its own would add a start (torch imported, ~2 s of CPU) and test nothing more."""
    started = time.monotonic()
    again = in_process(home, *quick_sweep_args(home)[2:], "--no-progress")
    record_property("recover_s", round(time.monotonic() - started, 1))  # the re-run that resumes the sweep
    assert again.returncode == 0, again.stderr
    (summary,), = query(home, "SELECT summary FROM collection_runs WHERE status = 'completed'")
    summary = json.loads(summary)
    measured_before = query(home, "SELECT count(*) FROM op_measurements WHERE run_id = ?", [interrupted_id])[0][0]
    assert measured_before == 0  # all adopted
    assert summary["rows_resumed"] == kept
    assert (interrupted_id in summary["resumed_runs"]) == (kept > 0)
    assert summary["configs_resumed"] > 0 or kept == 0
    total, distinct = query(home, "SELECT count(*), count(DISTINCT (config_key, cache_state)) FROM v_op_measurements")[0]
    assert total == distinct == 384  # nothing lost, nothing measured twice
    record_property("rows_kept", kept)
    record_property("rows_lost", kept - summary["rows_resumed"])


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_interrupt_says_what_was_kept_and_rerun_resumes(home, record_property, sig):
    child = Child(quick_sweep_args(home))
    child.wait_for(lambda c: c.configs_done() >= 20)
    child.proc.send_signal(sig)
    code, out, err = child.finish()
    assert code == 130
    assert "Traceback" not in err
    line = last_line(err)
    assert line.startswith("pmdb: interrupted; run ") and "kept" in line
    (run_id, status), = query(home, "SELECT run_id, status FROM collection_runs WHERE kind = 'ops'")
    assert status == "interrupted" and run_id in line
    kept = query(home, "SELECT count(*) FROM op_measurements WHERE run_id = ?", [run_id])[0][0]
    assert f"kept {kept} rows" in line and kept >= 20  # the batch in flight was written before exiting
    _resume_adopts(home, run_id, kept, record_property)


@pytest.mark.slow
def test_kill_9_shows_interrupted_to_readers_and_rerun_resumes(home, record_property):
    child = Child(quick_sweep_args(home))
    child.wait_for(lambda c: c.configs_done() >= 60)  # past the first 5 s batch
    child.proc.send_signal(signal.SIGKILL)
    child.finish()
    (run_id, status), = query(home, "SELECT run_id, status FROM collection_runs WHERE kind = 'ops'")
    assert status == "running"  # as the killed process left it
    runs = in_process(home, "runs", "--format", "json")  # a reader: may not write, still tells the truth
    assert runs.returncode == 0, runs.stderr
    assert [r["status"] for r in json.loads(runs.stdout)] == ["interrupted"]
    shown = in_process(home, "sql", "SELECT status FROM collection_runs", "--format", "csv")
    assert shown.stdout.split() == ["status", "interrupted"]
    kept = query(home, "SELECT count(*) FROM op_measurements WHERE run_id = ?", [run_id])[0][0]
    _resume_adopts(home, run_id, kept, record_property)
