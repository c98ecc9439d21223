"""The autograd engine's own cost of one backward call on a CPU (µs), apart from the nodes it runs.

A backward microbenchmark (:func:`collectors.ops.catalogue.autograd_pair`, an embedding lookup's ``backward``)
times a whole ``torch.autograd.grad`` call: the engine builds a graph task, counts dependencies, runs the node(s)
and hands the gradients back. In a training step that set-up is paid once per backward, while each of its nodes
(Kineto's ``...Backward0`` events, what the simulator prices) pays only its own run. On an idle 2-core Intel Xeon
(L3 480 MiB) the set-up is 21-27 µs, against 3.6 µs for a 4-element relu's node inside a chain
(``benchmarks/cache_states.py``): a small backward op's row is mostly this cost.

It is measured as one relu's isolated ``autograd.grad`` minus the same relu's per-node cost inside a chain of
:data:`CHAIN` relus (the slope between a 1- and a CHAIN-node backward), on a 4-element tensor, on the calling
thread's torch threads. :class:`EngineCallCost` re-measures it while a sweep runs (the host's load moves it:
12-48 µs loaded), and the sweep stores it with every CPU backward row (``op_measurements.engine_call_us``)."""
from __future__ import annotations

import time
from typing import Callable

import torch

from collectors.ops.timer import TimerSettings, time_cpu

CHAIN = 32           # relus in the chain whose slope is the per-node cost
REPS = 150           # timed calls of the isolated backward (the chains: a third of it, at least 5)
REFRESH_S = 20.0     # a sweep re-measures when its last figure is older than this (s)
ELEMENTS = 4         # a tensor this small: the node's own work is a few hundred ns


def median_us(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Median wall time of exactly ``reps`` calls of ``fn`` after ``warmup`` untimed ones (µs), timed as the sweep
    times a warm row (:func:`collectors.ops.timer.time_cpu`)."""
    return time_cpu(fn, TimerSettings(warmup=warmup, min_reps=reps, max_reps=reps, min_time_us=0.0)).median_us


def measure_engine_call_us(reps: int = REPS, elements: int = ELEMENTS, chain: int = CHAIN,
                           warmup: int = 3) -> dict[str, float]:
    """µs: ``single`` (one relu's isolated ``autograd.grad`` on ``elements`` floats), ``per_node`` (a relu's cost
    inside a ``chain``-relu backward) and ``call`` = single - per_node (>= 0): the engine's own cost of one
    backward call."""
    x = torch.randn(elements, requires_grad=True)
    grad = torch.randn(elements)
    ends = {}
    for k in (1, chain):
        z = x
        for _ in range(k):
            z = z.relu()
        ends[k] = median_us(lambda z=z: torch.autograd.grad(z, [x], grad, retain_graph=True), max(5, reps // 3),
                            warmup)
    y = x.relu()
    single = median_us(lambda: torch.autograd.grad(y, [x], grad, retain_graph=True), reps, warmup)
    per_node = max((ends[chain] - ends[1]) / (chain - 1), 0.0)
    return {"single": single, "per_node": per_node, "call": max(single - per_node, 0.0)}


class EngineCallCost:
    """The engine's per-call cost (µs) as a sweep goes: measured at the first :meth:`current` and again whenever
    the last figure is older than ``refresh_s`` (a few tens of ms each time)."""

    def __init__(self, refresh_s: float = REFRESH_S, reps: int = REPS):
        self.refresh_s, self.reps = refresh_s, reps
        self._value: float | None = None
        self._at = 0.0
        self.measured: list[float] = []   # every figure taken (µs), for the run summary

    def current(self) -> float:
        """The latest figure (µs), re-measured first when stale."""
        if self._value is None or time.monotonic() - self._at > self.refresh_s:
            self._value = round(measure_engine_call_us(self.reps)["call"], 2)
            self._at = time.monotonic()
            self.measured.append(self._value)
        return self._value
