"""The device time of one op config on CUDA: what a GPU's kernel models are fitted on.

One call between two CUDA events (:func:`collectors.ops.timer.time_cuda`, synchronised after each call) times the
host's launch path as much as the GPU: on an H200 (``../shared/data/gpu_kernels/h200_launch_floor.csv``) a
1M-element ``add`` took 23.8 µs that way and 11.8 µs per call launched 50 times back to back, and back to back a small
op is still bound by the host's dispatch (~11-13 µs per eager op there). So a CUDA config is timed three ways and
stored as one row (migration 0015):

- ``median_us`` .. ``min_us`` (``device_timing = 'kernels'``): per call, the summed device time of the kernels,
  copies and memsets the call launched, from the profiler (CUPTI), each call in a range of its own and synchronised
  before the next, so its device work cannot run into the next call's;
- ``single_call_us``: the median of one call between two events (what these rows held before 0015);
- ``back_to_back_us``: ``calls`` calls in a row between two events, divided by ``calls``, the best of ``ROUNDS``.

The arithmetic (:func:`per_call_us`, :func:`back_to_back_us`, :func:`calls_for`) is plain Python over (start, µs)
pairs; :func:`time_device` runs the op on the GPU and feeds it. All times are microseconds.
"""
from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Sequence

import torch

from collectors.ops.timer import Timing, TimerSettings, time_cuda

KERNELS = "kernels"            # device_timing of a row timed here
CALL_RANGE = "pmdb::device_call"  # the profiler range around each timed call
ROUNDS = 3                     # back-to-back rounds; the best is kept
MAX_CALLS = 50                 # calls per back-to-back round and profiled calls, at most (the H200 file's 50)


@dataclass(frozen=True)
class DeviceTiming:
    """One CUDA config timed three ways (µs; see the module docstring)."""

    kernels: Timing       # per-call device time of the launched kernels (profiler)
    single_call: Timing   # one call between two events, synchronised (host launch path included)
    back_to_back_us: float
    calls: int            # calls per back-to-back round

    def columns(self) -> dict[str, Any]:
        """The op_measurements columns beside the Timing's own (median_us .. warmup come from ``kernels``)."""
        return {"device_timing": KERNELS, "single_call_us": self.single_call.median_us,
                "back_to_back_us": self.back_to_back_us}


def calls_for(single_us: float, budget_us: float, low: int = 5, high: int = MAX_CALLS) -> int:
    """How many calls of ``single_us`` each fill ``budget_us``, within [low, high]."""
    if not math.isfinite(single_us) or single_us <= 0:
        return high
    return int(min(high, max(low, math.ceil(budget_us / single_us))))


def back_to_back_us(rounds_us: Sequence[float], calls: int) -> float:
    """µs per call of the fastest round of ``calls`` calls launched in a row (each round's total in µs)."""
    if calls < 1 or not rounds_us:
        raise ValueError("back_to_back_us needs at least one round of at least one call")
    return float(min(rounds_us)) / calls


def per_call_us(calls: Sequence[tuple[float, float]], activities: Iterable[tuple[float, float]]) -> list[float]:
    """Device µs of each call. ``calls``: the calls' host ranges (start, end µs), in order; ``activities``: device
    kernels, copies and memsets as (start µs, duration µs) on the same clock. An activity belongs to the last call
    that started at or before it: a call launches its work after it starts, and it synchronises before the next
    call starts. Activities before the first call are not the op's and are left out."""
    starts = [start for start, _ in calls]
    if any(b < a for a, b in zip(starts, starts[1:])):
        raise ValueError("calls must be in start order")
    totals = [0.0] * len(calls)
    for start, duration in activities:
        index = bisect.bisect_right(starts, start) - 1
        if index >= 0:
            totals[index] += float(duration)
    return totals


def profiled_calls(events: Iterable[Any], name: str = CALL_RANGE
                   ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(call ranges, device activities) from the profiler's events (``prof.events()``): the host ranges named
    ``name``, and every device event that is not a user annotation (the GPU-side copy of those ranges)."""
    cpu, cuda = torch.autograd.DeviceType.CPU, torch.autograd.DeviceType.CUDA
    ranges, activities = [], []
    for event in events:
        if event.device_type == cpu and event.name == name:
            ranges.append((event.time_range.start, event.time_range.end))
        elif event.device_type == cuda and event.name != name and not getattr(event, "is_user_annotation", False):
            activities.append((event.time_range.start, event.time_range.end - event.time_range.start))
    return sorted(ranges), activities


def _kernel_samples(fn: Callable[[], Any], calls: int, device: torch.device) -> list[float]:
    """Per-call device µs of ``calls`` calls under the profiler (CPU and CUDA activities)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            with record_function(CALL_RANGE):
                out = fn()
                torch.cuda.synchronize(device)
            del out
    ranges, activities = profiled_calls(prof.events())
    if len(ranges) != calls:
        raise RuntimeError(f"the profiler recorded {len(ranges)} of {calls} call ranges")
    return per_call_us(ranges, activities)


def _back_to_back_rounds(fn: Callable[[], Any], calls: int, device: torch.device) -> list[float]:
    """Each round's µs: ``calls`` calls launched in a row between two events."""
    rounds = []
    for _ in range(ROUNDS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(device)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) * 1e3)  # ms -> µs
    return rounds


def time_device(fn: Callable[[], Any], settings: TimerSettings, device: torch.device,
                warmup: int | None = None) -> DeviceTiming:
    """Time ``fn`` on CUDA the three ways (single call, back to back, profiler kernels); the profiled and the
    back-to-back calls fill about ``settings.min_time_us`` each (5 .. MAX_CALLS calls)."""
    single = time_cuda(fn, settings if warmup is None else replace(settings, warmup=warmup), device)
    calls = calls_for(single.median_us, settings.min_time_us, max(settings.min_reps, 1))
    with torch.cuda.device(device):
        b2b = back_to_back_us(_back_to_back_rounds(fn, calls, device), calls)
        samples = _kernel_samples(fn, calls, device)
    return DeviceTiming(Timing.from_samples(samples, single.warmup), single, b2b, calls)

