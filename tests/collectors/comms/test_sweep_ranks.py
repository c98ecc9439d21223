"""Launching real ranks: a rank's exception reaches the parent with its message, a rank killed
mid-sweep fails the run with nothing visible, and no rank process survives."""
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from collectors.comms import sweep_ranks
from collectors.comms.config import SweepConfig
from collectors.comms.sweep import run_sweep
from pmdb import platform

HERE = Path(__file__).resolve().parent


def _rank_children() -> list[int]:
    """Live spawned children of this process (the ranks), by their command line."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        state = stat.rsplit(")", 1)[1].split()[0]
        if ppid == os.getpid() and "spawn_main" in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def faults(monkeypatch):
    monkeypatch.syspath_prepend(str(HERE))
    import rank_faults
    return rank_faults


@pytest.mark.slow
def test_rank_exception_reaches_parent_with_its_message(faults):
    with pytest.raises(sweep_ranks.RankFailed) as failure:
        sweep_ranks.spawn(faults.raise_on_rank_one, 2, None, threads=1, on_step=lambda i, m: None)
    assert failure.value.rank == 1  # the root cause, not rank 0's later connection error
    assert "ValueError: boom from rank 1 after all_reduce gave 2" in str(failure.value)
    assert "Traceback" in failure.value.details
    assert _rank_children() == []


@pytest.mark.slow
def test_killed_rank_fails_the_sweep_and_nothing_counts(store):
    name = platform.resolve(store, None)
    config = SweepConfig(world_size=2, collectives=("all_reduce",), min_bytes=4, max_bytes=64, factor=2,
                         iters=50000, warmup=1)  # minutes unless killed: the kill comes first
    victims = []

    def kill_a_rank():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(_rank_children()) < 2:
            time.sleep(0.2)
        time.sleep(1.5)  # let the ranks start
        children = _rank_children()
        if children:
            victims.append(children[-1])
            os.kill(children[-1], signal.SIGKILL)

    killer = threading.Thread(target=kill_a_rank)
    killer.start()
    try:
        with pytest.raises(sweep_ranks.RankFailed, match="killed by SIGKILL"):
            run_sweep(store, config, name, progress=False)
    finally:
        killer.join()
    assert victims
    status, error = store.conn.execute("SELECT status, error FROM collection_runs WHERE kind = 'comms'").fetchone()
    assert status == "failed" and "SIGKILL" in error
    assert store.scalar("SELECT count(*) FROM v_collective_measurements") == 0
    assert store.scalar("SELECT count(*) FROM collective_measurements") == 0  # written only after all steps
    assert _rank_children() == []
