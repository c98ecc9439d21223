"""Kernel device time apart from the per-call host floor of a single-call latency table (µs).

NeuSight-style tables time ONE call of an op between two CUDA events and synchronise: the call's latency is

    latency = max(F, c + d)

with d the kernel's device time, F the **host floor** (the host's whole dispatch of one call: a kernel shorter than
it finishes before the end event is recorded) and c the **host lead** (the host time from the start event to the
kernel's start on the GPU, paid once per call, added to every kernel long enough to show). Both are properties of
the table's host and software, not of the GPU. In a training step kernels are queued back to back: neither is paid
per kernel (the simulator's overhead model, T1-T5, prices the host side), so kernel models are fitted on d.

The rule, per table (one file, one op):

- F = the 1 % quantile of the table's latencies (:data:`FLOOR_QUANTILE`): its smallest configurations, whose sheet
  roofline is a small fraction of a µs, all sit there (25-63 µs across the NeuSight tables);
- c = :data:`LEAD_SHARE` x F. The share is measured on the NeuSight tables themselves: on every element-wise table
  (11 ops x 5 GPUs) the latencies above 4 F lie on a straight line in the number of elements (bandwidth-bound) and
  the line's intercept is c (:func:`lead_share`); c / F is 0.46-0.75 (one outlier 1.49), median 0.56, quartiles
  0.53 and 0.61. GEMM, softmax and layer-norm tables are not linear in any one size, so their c is not measurable
  from the table alone; the share of the element-wise tables is used for every table;
- d = max(latency - c, :data:`MIN_DEVICE_SHARE` x latency). Where the latency is at the floor the kernel was hidden
  and d = F - c is only an upper bound on it (the true time of a tiny kernel is a few µs).

Checked against /work/shared/data/gpu_kernels/h200_launch_floor.csv (one H200, the same ops timed single-call and
back to back; nothing here was fitted on it): see tests/collectors/importers/test_launch_floor.py.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FLOOR_QUANTILE = 0.01      # a table's host floor F: this quantile of its latencies
LEAD_SHARE = 0.56          # c / F: median over the NeuSight element-wise tables (quartiles 0.53, 0.61)
MIN_DEVICE_SHARE = 0.1     # d never below this share of the latency (a guard: latency - c >= 0.4 F in practice)
LINEAR_ABOVE = 4.0         # lead_share fits the rows whose latency is above this many floors


@dataclass(frozen=True)
class HostFloor:
    """A table's per-call host cost (µs): ``floor_us`` F (the latency of a call whose kernel is hidden) and
    ``lead_us`` c (what the host adds before the kernel starts; removed from every row)."""

    floor_us: float
    lead_us: float

    def device_us(self, latency_us: np.ndarray) -> np.ndarray:
        """Device time d (µs) of single-call latencies (µs) of this table."""
        latency = np.asarray(latency_us, dtype=float)
        return np.maximum(latency - self.lead_us, MIN_DEVICE_SHARE * latency)

    def latency_us(self, device_us: np.ndarray) -> np.ndarray:
        """The single-call latency (µs) this table's host would show for kernels of device time d (µs)."""
        return np.maximum(self.floor_us, self.lead_us + np.asarray(device_us, dtype=float))


def table_floor(latency_us: np.ndarray, share: float = LEAD_SHARE) -> HostFloor:
    """The host floor of one table of single-call latencies (µs) of one op (see the module docstring)."""
    latency = np.asarray(latency_us, dtype=float)
    latency = latency[np.isfinite(latency) & (latency > 0)]
    if latency.size == 0:
        raise ValueError("no positive latencies: no floor")
    floor = float(np.quantile(latency, FLOOR_QUANTILE))
    return HostFloor(floor, share * floor)


def lead_share(latency_us: np.ndarray, work: np.ndarray) -> float:
    """c / F of one table of an op whose device time is linear in ``work`` (element-wise ops: elements): the
    intercept of the least-squares line latency = c + k x work over the rows above :data:`LINEAR_ABOVE` floors,
    over the table's floor F. NaN with fewer than 10 such rows."""
    latency, work = np.asarray(latency_us, dtype=float), np.asarray(work, dtype=float)
    floor = table_floor(latency).floor_us
    above = latency > LINEAR_ABOVE * floor
    if above.sum() < 10:
        return float("nan")
    design = np.column_stack([np.ones(int(above.sum())), work[above]])
    intercept = np.linalg.lstsq(design, latency[above], rcond=None)[0][0]
    return float(intercept / floor)
