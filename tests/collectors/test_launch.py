"""The shared multi-rank launcher with real processes (spawn start: a fresh interpreter per rank)."""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from collectors.launch import RankFailed, launch, send
from pmdb.errors import PmdbError


@pytest.fixture
def targets(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the ranks import launch_targets by name
    import launch_targets
    return launch_targets


def test_messages_reach_the_parent_in_order_before_results(targets):
    seen: list[tuple[int, object]] = []
    out = launch(targets.talk, 2, 5, start_method="spawn", on_message=lambda rank, obj: seen.append((rank, obj)),
                 progress=("talk", 10))
    assert out == [0, 1]
    for rank in (0, 1):
        assert [obj for r, obj in seen if r == rank] == [(rank, i) for i in range(5)]


def test_a_silent_death_wins_over_an_earlier_reported_error(targets):
    started = time.monotonic()
    with pytest.raises(RankFailed) as info:
        launch(targets.raise_then_get_killed, 2, 0.3, start_method="spawn")
    assert info.value.rank == 1 and "was killed by SIGKILL without a result" in str(info.value)
    assert info.value.exit_code == 1 and not info.value.user_mistake
    assert time.monotonic() - started < 30


def test_a_rank_refusing_its_input_is_a_user_mistake(targets):
    with pytest.raises(RankFailed, match="rank 0 failed: PmdbError: bad table file") as info:
        launch(targets.refuse_input, 2, "bad table file", start_method="spawn")
    assert info.value.user_mistake and info.value.exit_code == 2


def test_rank_env_and_rendezvous_variables(targets):
    out = launch(targets.env_of, 2, "PMDB_TEST_VALUE", start_method="spawn", rank_env={"PMDB_TEST_VALUE": "x7"})
    assert [o["RANK"] for o in out] == ["0", "1"] and [o["LOCAL_RANK"] for o in out] == ["0", "1"]
    assert all(o["PMDB_TEST_VALUE"] == "x7" and o["WORLD_SIZE"] == "2" and o["MASTER_ADDR"] == "127.0.0.1"
               for o in out)


def test_send_outside_a_launch_is_refused():
    with pytest.raises(RuntimeError, match="send"):
        send("nobody listens")


def test_bad_world_size():
    with pytest.raises(PmdbError, match="bad world size"):
        launch(print, 0, None)


def test_ctrl_c_in_the_parent_stops_every_rank(targets):
    """A signal whose handler raises KeyboardInterrupt (as Ctrl-C and the CLI's SIGTERM do) once both ranks run."""
    pids: list[int] = []

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    def on_message(rank, pid):
        pids.append(pid)
        if len(pids) == 2:
            os.kill(os.getpid(), signal.SIGALRM)

    previous = signal.signal(signal.SIGALRM, interrupt)
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            launch(targets.hang, 2, 120.0, start_method="spawn", on_message=on_message)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert len(set(pids)) == 2 and time.monotonic() - started < 30
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)     # stopped and reaped
