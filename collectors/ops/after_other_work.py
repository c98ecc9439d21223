"""What a call pays when its own code path has not run for a while: an op timed right after other work (µs).

Every microbenchmark state runs the op back to back (warm), or after flushing its operands and re-running its own
dispatch path on a twin (cold): its kernel and dispatch code are always hot. A training step runs each op kind once
per layer, milliseconds apart, with other kernels between. On the 2-core AMD EPYC host (32 MiB L3, 2026-11-30,
``benchmarks/busy_wait_decay.py`` section E) gelu on 128x256 took 25 µs warm, 44 / 73 / 159 / 175 µs after 0.5 / 2 /
8 / 16 ms of other ops on other data, and 25 / 28 / 35 / 37 after the same time spent running gelu itself on other
operands; layer_norm and the 1024-row shapes alike: a cost per call, not per byte, that grows with the time the op's
own code was away.

:func:`away_curve` times a forward callable warm and right after :data:`WAITS_US` of :func:`other_work` (a
256x256 matmul, an add and a relu on their own operands, again and again: neither the op's kernel nor its operands),
alternating, medians of ``reps``; ``collect ops`` runs it on the smallest config of each op and implementation it
measures on a CPU (its forward pass), if that needs at most 1 MiB, and stores the curves in its run summary
(``"code_away"``), which :mod:`simulator.code_away` turns into a price per call. About 0.1 s per op. The small
config keeps the operands' own decay (priced apart, :mod:`simulator.cache_decay`) out of it: an op with no config
that small (an embedding lookup over its tables) is not timed.
"""
from __future__ import annotations

import statistics
import time
from typing import Any, Callable

import torch

WAITS_US = (500, 2000, 8000)   # time away (µs)
REPS = 7
_A, _B = torch.randn(256, 256), torch.randn(256, 256)


def other_work(us: float) -> None:
    """Other real ops on other data for ``us`` µs: a 256x256 matmul, an add and a relu, repeated (768 KiB of
    operands, one thread)."""
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        torch.relu(torch.mm(_A, _B) + _A)


def timed_us(fn: Callable[[], Any]) -> float:
    """µs of one call of ``fn``."""
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e3


def away_curve(fn: Callable[[], Any], reps: int = REPS) -> dict[str, Any]:
    """``{"warm_us", "waits_us", "after_us"}``: the median µs of ``fn`` right after itself and right after each
    wait of :func:`other_work`, the states alternating (one thread; the caller's count is restored)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fn()
        fn()
        warm: list[float] = []
        after: list[list[float]] = [[] for _ in WAITS_US]
        for _ in range(reps):
            fn()
            warm.append(timed_us(fn))
            for k, wait in enumerate(WAITS_US):
                fn()
                other_work(wait)
                after[k].append(timed_us(fn))
    finally:
        torch.set_num_threads(threads)
    return {"warm_us": round(statistics.median(warm), 2), "waits_us": list(WAITS_US),
            "after_us": [round(statistics.median(a), 2) for a in after]}
