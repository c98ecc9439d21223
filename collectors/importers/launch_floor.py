"""Kernel device time apart from the per-call host floor of a single-call latency table (µs).

NeuSight-style tables time ONE call of an op between two CUDA events and synchronise: the call's latency is

    latency = max(F, c + d)

with d the kernel's device time, F the **host floor** (the host's whole dispatch of one call: a kernel shorter than
it finishes before the end event is recorded) and c the **host lead** (the host time from the start event to the
kernel's start on the GPU, paid once per call, added to every kernel long enough to show). Both are properties of
the table's host and software, not of the GPU. In a training step kernels are queued back to back: neither is paid
per kernel (the simulator's overhead model, T1-T5, prices the host side), so kernel models are fitted on d.

The rule, per table (one file, one op) of one import (one GPU's tables, :func:`import_floors`):

- F = the 1 % quantile of the table's latencies (:data:`FLOOR_QUANTILE`) where the table reaches a **plateau**
  (:func:`has_plateau`: its 2 % quantile within 15 % of its 1 % quantile, many configurations at one latency): its
  smallest configurations, whose sheet roofline is a small fraction of a µs, all sit there (25-94 µs across the
  NeuSight tables; an op's own host path sets it: linear's 54-94 µs above the element-wise 25-55 µs, as on the H200
  where linear's lead is ~30 µs and add's ~11 µs). A table without a plateau (NeuSight's conv: its smallest
  configurations are real work, the 2 % quantile 1.35-1.62x the 1 %) has no floor of its own to read: its 1 %
  quantile (105-198 µs) is work, and 0.56 of it removed as much as its fastest rows took, or more. It takes the
  **import's floor**, the median F of the import's plateau tables, never above its own fastest latency (latency >=
  F); in an import without a plateau table (a conv file imported alone) its F is that fastest latency, the only
  bound it gives. The plateau tables keep their own F rather than one F for all: on the H200 below, one floor
  (25 µs, the median) would take linear's lead from 26 to 14 µs and put its big GEMMs up to 8.4 % above their
  back-to-back time (per table: 1.9 %);
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
import pandas as pd

FLOOR_QUANTILE = 0.01      # a table's host floor F: this quantile of its latencies
PLATEAU_QUANTILE = 0.02    # a table reaches a plateau when this quantile of its latencies is ...
PLATEAU_RATIO = 1.15       # ... within this factor of its FLOOR_QUANTILE (NeuSight: <= 1.07 with, >= 1.35 without)
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


def has_plateau(latency_us: np.ndarray) -> bool:
    """Whether a table's fastest configurations pile up at one latency (its host floor): the
    :data:`PLATEAU_QUANTILE` of its latencies (µs) within :data:`PLATEAU_RATIO` of the :data:`FLOOR_QUANTILE`."""
    latency = np.asarray(latency_us, dtype=float)
    latency = latency[np.isfinite(latency) & (latency > 0)]
    if latency.size == 0:
        return False
    low, next_up = np.quantile(latency, [FLOOR_QUANTILE, PLATEAU_QUANTILE])
    return bool(next_up <= PLATEAU_RATIO * low)


def import_floors(tables: list[np.ndarray], share: float = LEAD_SHARE) -> list[HostFloor]:
    """The host floor of each table (single-call latencies, µs) of ONE import of one GPU's tables, in order: a
    table with a plateau keeps its own (:func:`table_floor`); one without takes the median floor of the import's
    plateau tables, never above its own fastest latency, which is its floor where the import has no plateau table
    (a lone conv file)."""
    own = [table_floor(latency, share) for latency in tables]
    plateau = [has_plateau(latency) for latency in tables]
    shared = float(np.median([f.floor_us for f, p in zip(own, plateau) if p])) if any(plateau) else np.inf
    out = []
    for floor, latency, flat in zip(own, tables, plateau):
        if flat:
            out.append(floor)
            continue
        latency = np.asarray(latency, dtype=float)
        value = min(shared, float(latency[np.isfinite(latency) & (latency > 0)].min()))
        out.append(HostFloor(value, share * value))
    return out


def settle_import(frames: list[pd.DataFrame]) -> None:
    """Re-separate the rows of one import's parsed files in place with :func:`import_floors`: each (file, op) with
    ``single_call_us`` is a table; ``median_us`` (d), ``host_floor_us`` and ``host_lead_us`` are rewritten."""
    groups: list[tuple[pd.DataFrame, pd.Index]] = []
    for frame in frames:
        if "single_call_us" not in frame or not frame["single_call_us"].notna().any():
            continue
        timed = frame[frame["single_call_us"].notna()]
        groups += [(frame, index) for index in timed.groupby("op", sort=False).groups.values()]
    if not groups:
        return
    floors = import_floors([frame.loc[index, "single_call_us"].to_numpy(dtype=float) for frame, index in groups])
    for (frame, index), floor in zip(groups, floors):
        frame.loc[index, "median_us"] = floor.device_us(frame.loc[index, "single_call_us"].to_numpy(dtype=float))
        frame.loc[index, "host_floor_us"] = floor.floor_us
        frame.loc[index, "host_lead_us"] = floor.lead_us


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
