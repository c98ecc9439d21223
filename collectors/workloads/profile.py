"""The profiled passes of a rank: a Kineto-only pass (op timings) and an execution-trace pass (the op graph).

They are separate because recording the ET inflates the Kineto op durations (environment.md). Both passes replay
the same batches, after a few untimed warm-up steps, and mark iteration n (1-based) with a ``ProfilerStep#n``
record_function: the profiler's own step marker name, placed so the per-iteration barrier stays outside the marked
iteration, exactly like the ground-truth timer (torch.profiler's ``step()`` would open the next step before the
barrier), and so the ET pass, which has no profiler object, carries the same markers.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

STEP_MARKER = "ProfilerStep#{}"


def _steps(step: Callable[[int], None], ids: Sequence[int], barrier: Callable[[], None] | None,
           sync: Callable[[], None] | None) -> None:
    for n, k in enumerate(ids, 1):
        if barrier:
            barrier()
        with record_function(STEP_MARKER.format(n)):
            step(k)
            if sync:
                sync()


def _warm(step: Callable[[int], None], ids: Sequence[int], barrier: Callable[[], None] | None) -> None:
    for k in ids:
        if barrier:
            barrier()
        step(k)


def kineto_profiler(cuda: bool = False) -> profile:
    """The profiler as the Kineto pass configures it (CPU activity, CUDA too on a GPU, input shapes recorded): one
    place, so that the profiler-tax calibration (:mod:`collectors.workloads.profiler_tax`) times what a trace holds."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    return profile(activities=activities, record_shapes=True)


def kineto_pass(step: Callable[[int], None], warmup_ids: Sequence[int], ids: Sequence[int], path: Path, *,
                barrier: Callable[[], None] | None = None, sync: Callable[[], None] | None = None,
                cuda: bool = False) -> float:
    """Record a Kineto (Chrome JSON) trace of ``ids`` with shapes to ``path``; returns the pass's wall seconds."""
    start = time.perf_counter()
    _warm(step, warmup_ids, barrier)
    with kineto_profiler(cuda) as prof:
        _steps(step, ids, barrier, sync)
    prof.export_chrome_trace(str(path))
    return time.perf_counter() - start


def et_pass(step: Callable[[int], None], warmup_ids: Sequence[int], ids: Sequence[int], path: Path, *,
            barrier: Callable[[], None] | None = None, sync: Callable[[], None] | None = None) -> float:
    """Record a PyTorch execution trace (ET JSON) of ``ids`` to ``path``; returns the pass's wall seconds."""
    start = time.perf_counter()
    _warm(step, warmup_ids, barrier)
    observer = ExecutionTraceObserver()
    observer.register_callback(str(path))
    observer.start()
    try:
        _steps(step, ids, barrier, sync)
    finally:
        observer.stop()
        observer.unregister_callback()
    return time.perf_counter() - start
