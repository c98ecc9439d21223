"""Rank programs for the shared launcher's tests (imported by name in the rank processes)."""
from __future__ import annotations

import os
import signal
import time

from collectors.launch import send, tick


def talk(rank: int, world_size: int, payload: int) -> int:
    """Send ``payload`` numbered messages, tick once per message, return the rank squared."""
    for i in range(payload):
        send((rank, i))
        tick()
    return rank * rank


def raise_then_get_killed(rank: int, world_size: int, payload: float) -> None:
    """Rank 0 raises at once; rank 1 is SIGKILLed ``payload`` s later (a silent death reported after rank 0)."""
    if rank == 0:
        raise RuntimeError("connection closed by peer")
    time.sleep(payload)
    os.kill(os.getpid(), signal.SIGKILL)


def env_of(rank: int, world_size: int, payload: str) -> dict:
    """What a rank's environment holds for ``payload`` and the rendezvous variables."""
    return {k: os.environ.get(k) for k in (payload, "RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR")}


def refuse_input(rank: int, world_size: int, payload: str) -> None:
    """Rank 0 finds its input bad (a user mistake); rank 1 finishes normally."""
    from pmdb.errors import PmdbError

    if rank == 0:
        raise PmdbError(payload)


def hang(rank: int, world_size: int, payload: float) -> None:
    """Tell the parent this rank's pid, then sleep ``payload`` s (longer than any test waits)."""
    send(os.getpid())
    time.sleep(payload)
