"""The profiler's own cost per recorded op event on this host (µs), measured the way ``collect workload`` profiles.

A short block of calls (0.1-1 ms, shorter than a scheduler slice, so that most blocks run undisturbed on a loaded
host) is timed (``perf_counter_ns`` around the block) without the profiler and inside
:func:`collectors.workloads.profile.kineto_profiler` (CPU activity, input shapes recorded: the Kineto pass), blocks
alternating so that a noisy neighbour slows both alike; medians over the blocks. Per case:

* ``tax_us``: (median profiled block - median unprofiled block) / op events the profiler recorded in a block, per
  event: what profiling adds to the wall time of a step;
* ``kept_tax_us``: what of it a stored overhead table holds. Every profiled block is cut into the samples
  ``pmdb fit overheads`` takes on a CPU (T1 between top-level ops under 200 µs, T2/T5/T3 around nested calls, the
  whole time of a leaf), each (op name, kind) is reduced to the mean of its samples within [Q1 - 1.5 IQR, Q3 + 1.5
  IQR] as the fitter does, the block is rebuilt from those means, and the rebuilt call less the call of the
  fastest unprofiled block is divided by the events per call (uniform cases only, see :func:`measure_case`): an
  upper bound, since the kept means have shed the stalls a loaded host puts in every block while the fastest
  block has the fewest. Much of the wall tax comes in rare long stalls that the IQR filter drops.

Cases: a leaf op (``torch.add`` of 16 floats: one event a call), a functional linear (8 x 32 by 32 x 32:
``aten::linear`` and seven nested events) and a small MLP's training step (three Linear layers with ReLU, batch 8:
forward, backward, SGD; ~160 events). Diagnosis of the overhead samples (``benchmarks/host_op_diagnosis.py
--profiler-tax``); nothing is fitted on it.
"""
from __future__ import annotations

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from collectors.workloads.profile import kineto_profiler

T1_MAX_US = 200.0   # the overheads' T1 window (fitters/overheads.py): longer gaps are not kept
IQR_FACTOR = 1.5


@dataclass(frozen=True)
class TaxCase:
    """One calibration case; times µs (per call unless named per event)."""

    name: str
    events_per_call: float
    unprofiled_us: float    # median unprofiled block / calls
    profiled_us: float      # median profiled block / calls
    tax_us: float           # per event: (profiled - unprofiled) / events per call
    tax_q25_us: float       # per event, quartiles of the tax of each profiled block against its unprofiled neighbour
    tax_q75_us: float
    kept_us: float | None       # the profiled call rebuilt from IQR-kept sample means (uniform cases only)
    kept_tax_us: float | None   # per event: (kept - fastest unprofiled block's call) / events per call
    blocks: int


def _cases() -> list[tuple[str, Callable[[], None], int, bool]]:
    """(name, one call, calls per block, uniform: every call the same ops with the same gaps)."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, generator=gen), torch.randn(16, generator=gen)
    x, w = torch.randn(8, 32, generator=gen), torch.randn(32, 32, generator=gen)
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                              torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(mlp.parameters(), lr=1e-3)
    batch = torch.randn(8, 32, generator=gen)

    def train() -> None:
        opt.zero_grad(set_to_none=True)
        mlp(batch).sum().backward()
        opt.step()

    return [("leaf op (add, 16 floats)", lambda: torch.add(a, b), 100, True),
            ("linear (8x32 @ 32x32)", lambda: torch.nn.functional.linear(x, w), 40, True),
            ("MLP step (fw, bw, SGD)", train, 1, False)]


def _block(call: Callable[[], None], calls: int) -> float:
    start = time.perf_counter_ns()
    for _ in range(calls):
        call()
    return (time.perf_counter_ns() - start) / 1e3


def _kept_mean(values: list[float]) -> float:
    """Mean of the values within [Q1 - k IQR, Q3 + k IQR] (as fitters.overheads.iqr_summary)."""
    v = np.asarray(values, dtype=float)
    q1, q3 = np.percentile(v, [25, 75])
    spread = IQR_FACTOR * (q3 - q1)
    return float(v[(v >= q1 - spread) & (v <= q3 + spread)].mean())


def _annotation(event: Any) -> bool:
    return bool(getattr(event, "is_user_annotation", False))


def _top(event: Any) -> bool:
    """A top-level op: every ancestor an annotation (as :func:`pmdb.traces.rows.top_level_mask`)."""
    parent = event.cpu_parent
    while parent is not None:
        if not _annotation(parent):
            return False
        parent = parent.cpu_parent
    return True


def samples(events: list[Any], out: dict[tuple[str, str], list[float]] | None = None
            ) -> dict[tuple[str, str], list[float]]:
    """T1/T2/T3/T5 samples (µs) per (op name, kind) of profiler events (``prof.events()``; annotations are not
    ops), cut as the CPU overheads are: T1 between consecutive top-level ops under T1_MAX_US, T2/T5/T3 around the
    direct child ops of each op, a leaf's whole time as its T5. Values clamped at 0; added to ``out`` if given."""
    out = defaultdict(list) if out is None else out
    ops = sorted((e for e in events if not _annotation(e)), key=lambda e: (e.time_range.start, -e.time_range.end))
    tops = [e for e in ops if _top(e)]
    for before, after in zip(tops, tops[1:]):
        gap = after.time_range.start - before.time_range.end
        if gap < T1_MAX_US:
            out[(after.name, "T1")].append(max(gap, 0.0))
    for e in ops:
        kids = sorted((c for c in e.cpu_children if not _annotation(c)), key=lambda c: c.time_range.start)
        if not kids:
            out[(e.name, "T5")].append(max(e.time_range.end - e.time_range.start, 0.0))
            continue
        out[(e.name, "T2")].append(max(kids[0].time_range.start - e.time_range.start, 0.0))
        out[(e.name, "T3")].append(max(e.time_range.end - kids[-1].time_range.end, 0.0))
        for u, v in zip(kids, kids[1:]):
            out[(e.name, "T5")].append(max(v.time_range.start - u.time_range.end, 0.0))
    return out


def rebuilt_us(groups: dict[tuple[str, str], list[float]]) -> float:
    """The profiled span rebuilt from the groups' IQR-kept means: every sample priced at its group's mean (µs)."""
    return sum(len(values) * _kept_mean(values) for values in groups.values())


def measure_case(name: str, call: Callable[[], None], calls: int, blocks: int, uniform: bool = True) -> TaxCase:
    """Alternating unprofiled / profiled blocks of ``calls`` calls (after a warm-up of each kind). ``kept_*`` only
    for a ``uniform`` case: where one op name follows gaps of different kinds (a step's Python between layers, then
    a tight loop), the IQR filter also drops the name's rare long gaps, which are no profiler cost."""
    _block(call, calls)
    with kineto_profiler():
        _block(call, calls)              # the profiler's first start in a process is slower
    plain, profiled, groups, events = [], [], defaultdict(list), 0
    for _ in range(blocks):
        plain.append(_block(call, calls))
        with kineto_profiler() as prof:
            profiled.append(_block(call, calls))
        recorded = prof.events()
        events += sum(1 for e in recorded if not _annotation(e))
        samples(recorded, groups)
    per_call = events / (calls * blocks)
    unprofiled, with_profiler = statistics.median(plain) / calls, statistics.median(profiled) / calls
    pairs = sorted((p - u) / calls / per_call for p, u in zip(profiled, plain))
    kept = rebuilt_us(groups) / (calls * blocks) if uniform else None
    return TaxCase(name, per_call, unprofiled, with_profiler, (with_profiler - unprofiled) / per_call,
                   float(np.percentile(pairs, 25)), float(np.percentile(pairs, 75)), kept,
                   None if kept is None else (kept - min(plain) / calls) / per_call, blocks)


def measure(blocks: int = 41, threads: int = 1) -> list[TaxCase]:
    """Every case, ``blocks`` alternating blocks each, at ``threads`` intra-op threads (restored after)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return [measure_case(name, call, calls, blocks, uniform) for name, call, calls, uniform in _cases()]
    finally:
        torch.set_num_threads(before)
