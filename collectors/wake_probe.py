"""The host's vector wake-up at one moment: what a GEMM loses right after a stretch of scalar work (µs).

On the 48 MiB-L3 Intel host (AVX-512) an op that follows more than ~0.5 ms of scalar work (a dropout's random draws,
Python between modules) takes 2-5x its back-to-back time on its first call, and the loss fades over the next two or
three calls (benchmarks/vector_idle.py, benchmarks/results/vector_idle_*). pmdb's microbenchmarks repeat one op back
to back, so they never see it, and no prediction rule prices it yet. This probe records how large it is on the host
that measures, next to the memory probe (:mod:`collectors.memory_probe`), so that every `collect ops` run says it and
a rule can later take its parameters from the host rather than from the main job's errors.

One probe, one thread: :data:`ROUNDS` rounds of a fixed linear (:data:`SHAPE`, the quickstart's feed-forward
up-projection) — three untimed calls, one timed back to back, :data:`SPIN_US` µs of a pure-Python spin (no memory
traffic, no vector instructions), then :data:`CALLS` timed calls. Back-to-back and after-spin calls alternate in
every round, so a slow phase of a shared host slows both alike. Stored: ``{"at", "op", "spin_us", "rounds",
"back_to_back_us", "after_spin_us": [median of each call], "lost_us"}``, where ``lost_us`` is what the calls after the
spin took beyond back to back, summed. About 0.1 s.
"""
from __future__ import annotations

import statistics
import time
from datetime import datetime, timezone
from typing import Any, Callable

import torch

SHAPE = (512, 64, 256)   # rows, in features, out features of the probed linear
SPIN_US = 2000.0         # above the ~0.5 ms of scalar work after which the first call slows
CALLS = 4                # calls after the spin: the loss has faded by the fourth (vector_idle, part 2)
ROUNDS = 15
WARM_CALLS = 3


def spin(us: float) -> None:
    """Busy-wait ``us`` µs in pure Python (scalar code, no memory traffic)."""
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        pass


def timed_us(fn: Callable[[], object]) -> float:
    """µs of one call of ``fn``."""
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e3


def read_wake(rounds: int = ROUNDS, spin_us: float = SPIN_US, calls: int = CALLS) -> dict[str, Any]:
    """One probe on the calling thread (its thread count as set: `collect ops` measures on one)."""
    rows, features, out = SHAPE
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(rows, features, generator=gen), torch.randn(out, features, generator=gen),
               torch.randn(out, generator=gen))

    def linear() -> object:
        return torch.nn.functional.linear(x, w, b)

    back: list[float] = []
    after: list[list[float]] = [[] for _ in range(calls)]
    with torch.no_grad():
        for _ in range(rounds):
            for _ in range(WARM_CALLS):
                linear()
            back.append(timed_us(linear))
            spin(spin_us)
            for k in range(calls):
                after[k].append(timed_us(linear))
    back_us = statistics.median(back)
    after_us = [statistics.median(times) for times in after]
    return {"at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "op": f"linear {rows}x{features}->{out}", "spin_us": spin_us, "rounds": rounds,
            "back_to_back_us": round(back_us, 1), "after_spin_us": [round(t, 1) for t in after_us],
            "lost_us": round(sum(max(t - back_us, 0.0) for t in after_us), 1)}
