"""A truth's compute pace against its prices': the host's compute phase when a step was measured, relative to when
the microbenchmarks that priced it were taken (:mod:`collectors.wake_probe`'s back-to-back linear on one thread; µs).

The memory probe (:mod:`simulator.memory_phase`) sees a neighbour's use of memory. It did not see every slow phase:
in the demo of 2026-11-30 that missed three targets (f5 of that day's record), the truths and the prices were both
slow, by different amounts, while its memory pace stayed x0.95-1.17. A slow phase of the CPU itself (a busy
sibling thread, a lower clock) slows a small in-cache GEMM instead. So every workload run's rank 0 also times the
wake probe's linear, one thread, before its warm-up and after its timed iterations, as every ``collect ops`` run
does at its start and after each round; ``ratio`` = the truth's median back-to-back time over the prices' median.
Above 1 the truth was measured while the CPU was slower than when the prices were taken. Nothing is corrected by
it. Runs recorded before the truth's probe existed give None.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from pmdb.store import Store
from simulator.memory_phase import Pace, frame_rows, run_summaries, sweep_summaries
from simulator.wake_loss import read_probes

SHOWN = 3   # runs a warning names, the farthest from their prices' pace first


@dataclass(frozen=True)
class ComputePace(Pace):
    """The back-to-back times of the probed ``op`` (its name, 'linear 512x64->256')."""

    op: str = ""

    def sentence(self) -> str:
        """One sentence for people: what was measured, and what it says of the error (:data:`SAME_PHASE`)."""
        measured = (f"compute pace {self.label()}: a one-thread {self.op} took {self.truth_us:.0f} µs back to back "
                    f"around this run's truth ({self.truth_probes} probes) and {self.prices_us:.0f} µs around the op "
                    f"sweeps that priced it ({self.prices_probes})")
        if self.same_phase:
            return f"{measured}: the CPU ran at the same pace at both"
        return (f"{measured}; the CPU was in another phase at the truth (a busy neighbour, another clock): an error "
                f"of that order may be the host's phase, not the model's")

    def to_json(self) -> dict[str, Any]:
        return {"compute_truth_us": self.truth_us, "compute_prices_us": self.prices_us,
                "compute_pace": round(self.ratio, 4)}


def truth_probes(store: Store, workload_run_id: str) -> list[dict[str, Any]]:
    """The wake probes recorded with one workload run and its completed relaunches."""
    return [p for summary in run_summaries(store, workload_run_id) for p in read_probes(summary)]


def price_probes(store: Store, platform: str) -> list[dict[str, Any]]:
    """The wake probes of every completed ``collect ops`` run of the platform."""
    return [p for summary in sweep_summaries(store, platform) for p in read_probes(summary)]


def compute_pace(store: Store, workload_run_id: str | None, platform: str,
                 prices: list[dict[str, Any]] | None = None) -> ComputePace | None:
    """The truth's compute pace against its prices' over the probes of one op (the one most price probes used),
    None where either side has no probe of it. ``prices``: the platform's :func:`price_probes`, when the caller
    judges several runs of it (read here otherwise)."""
    if not workload_run_id:
        return None
    truth = truth_probes(store, workload_run_id)
    prices = price_probes(store, platform) if prices is None and truth else prices
    if not truth or not prices:
        return None
    op = statistics.mode(p["op"] for p in prices)
    truth_us = [float(p["back_to_back_us"]) for p in truth if p["op"] == op]
    prices_us = [float(p["back_to_back_us"]) for p in prices if p["op"] == op]
    if not truth_us:
        return None
    return ComputePace(float(statistics.median(truth_us)), float(statistics.median(prices_us)), len(truth_us),
                       len(prices_us), op)


def off_phase(runs: list[tuple[str, ComputePace | None]]) -> list[tuple[str, ComputePace]]:
    """The runs (label, pace) whose truth ran in another compute phase than their prices (beyond
    :data:`SAME_PHASE`), the farthest first."""
    return sorted(((label, pace) for label, pace in runs if pace is not None and not pace.same_phase),
                  key=lambda item: -abs(math.log(item[1].ratio)))


def pace_warning(runs: list[tuple[str, ComputePace | None]]) -> str | None:
    """One warning naming the runs (label, pace) of :func:`off_phase` (:data:`SHOWN` of them), None where there are
    none: what the report says."""
    off = off_phase(runs)
    if not off:
        return None
    named = ", ".join(f"{label} {pace.label()}" for label, pace in off[:SHOWN])
    if len(off) > SHOWN:
        named += f" and {len(off) - SHOWN} more"
    return (f"compute pace: a one-thread {off[0][1].op} took another time at the truth than at the op sweeps "
            f"({named}): an error of that order may be the host's phase, not the model's")


def pace_brief(runs: list[tuple[str, ComputePace | None]]) -> str | None:
    """The same in one line of at most 78 columns, the range of paces and how many runs (the quickstart's
    one-screen summary), None where there are none."""
    off = off_phase(runs)
    if not off:
        return None
    ratios = sorted(pace.ratio for _, pace in off)
    span = f"x{ratios[0]:.2f}" + (f"-{ratios[-1]:.2f}" if len(ratios) > 1 else "")
    return (f"compute pace {span} at {len(off)} truth{'s' if len(off) > 1 else ''} vs the op sweeps: maybe the "
            f"host's phase")


def frame_paces(store: Store, frame: Any) -> list[ComputePace | None]:
    """The compute pace of every row of a predictions frame (:func:`simulator.memory_phase.frame_rows`)."""
    return frame_rows(store, frame, price_probes, compute_pace)
