"""Ground truth: per-iteration wall time of a training loop without the profiler, and its summary over ranks.

In each rank: W untimed warm-up iterations, then N timed ones; with world size > 1 every iteration starts with a
barrier (outside the timed interval) so the ranks start it together. The workload's time is the median over
iterations of the max over ranks; the spread is (p90 - p10) / median of that same series.
"""
from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np


def time_iterations(step: Callable[[int], None], warmup_ids: Sequence[int], timed_ids: Sequence[int],
                    barrier: Callable[[], None] | None = None,
                    sync: Callable[[], None] | None = None) -> list[float]:
    """Run ``step(k)`` for the warm-up batches, then time it for each timed batch; µs per timed iteration.

    ``barrier`` runs before each iteration (not timed); ``sync`` (e.g. a device synchronize) runs before the clock
    is read at both ends."""
    for k in warmup_ids:
        if barrier:
            barrier()
        step(k)
    if sync:
        sync()
    times = []
    for k in timed_ids:
        if barrier:
            barrier()
        start = time.perf_counter_ns()
        step(k)
        if sync:
            sync()
        times.append((time.perf_counter_ns() - start) / 1e3)
    return times


def launch_median_us(results: Sequence[dict]) -> float:
    """One launch's ground truth (µs): the median step of its ranks' results (``times_us`` each), as :func:`summarise`."""
    return float(summarise([r["times_us"] for r in results])["measured_us"])


def summarise(per_rank: Sequence[Sequence[float]]) -> dict[str, float]:
    """``measured_us`` (median over iterations of the max over ranks), ``spread`` ((p90 - p10) / median), and the
    mean/min/max of the per-iteration max, from per-rank lists of µs."""
    times = np.asarray(per_rank, dtype=float)
    if times.ndim != 2 or times.shape[1] == 0:
        raise ValueError("need at least one timed iteration per rank")
    worst = times.max(axis=0)
    median = float(np.median(worst))
    p10, p90 = np.percentile(worst, [10, 90])
    return {"measured_us": median, "spread": float((p90 - p10) / median) if median > 0 else float("nan"),
            "mean_us": float(worst.mean()), "min_us": float(worst.min()), "max_us": float(worst.max())}
