"""Where an op's operands sit inside a training step, from their reuse distances (``--cache-state reuse``).

The kernel microbenchmarks time each op warm (back to back: operands in L2 when they fit there, else in the
last-level cache) and cold (flushed: from DRAM). Inside a step an operand is found in the cache level that its reuse
distance (bytes of other data touched since its last use, :mod:`pmdb.traces.reuse`) plus its own size fits in,
under LRU:

* within L2 (or within the LLC when the op's operands exceed L2, so that its warm timing came from the LLC too):
  the warm timing holds;
* beyond the LLC: the cold timing holds;
* in the LLC while the warm timing came from L2: half-way.

An op's **cold share** ``f`` is the byte-weighted mean of these (0, 1, 0.5) over its distinct input storages, and
its time ``(1-f) * warm + f * cold``: linear in the bytes, because each byte's cost adds to the op's time (an op of
compute C and memory time M_warm or M_cold per state takes C + (1-f) M_warm + f M_cold). Until RULES_VERSION 7 it
was ``warm^(1-f) * cold^f``, which for a share between 0 and 1 prices below that sum (f = 0.5, cold = 2.6 x warm:
1.61 x warm against 1.80). No parameter is fitted: the capacities are the platform's detected cache sizes
(:attr:`pmdb.platform.Platform.cache_bytes`). An op without sized inputs (no execution trace) is priced
half-way. Sizes in bytes.

Where the run recorded the LLC it found (:mod:`simulator.llc_found`: reads of 16, 64 and 256 MiB against the DRAM
pace, at the run's time), that measured fraction replaces "all of it while the sysfs LLC holds it": on a shared
host a process finds a share of the LLC that moves with its neighbours. Where its probes also recorded how the
caches decay over time (:mod:`simulator.cache_decay`, RULES_VERSION 13) and the reuse distances carry the µs since
each operand's last access, the bytes found in L2 and in the LLC are scaled by their level's surviving share at
that time: on a shared host an operand last touched a step ago is cold though few bytes came between.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from pmdb.traces.reuse import cached_bytes

LLC_NOT_L2 = 0.5   # cold share of bytes found in the LLC by an op whose warm timing had them in L2
UNKNOWN = 0.5      # cold share of an op without reuse distances (half-way)


def cold_share(reuse: Sequence[Sequence[float]], l2_bytes: float, llc_bytes: float,
               found: Callable[[float], float] | None = None, sharing: int = 1) -> float:
    """The op's cold share in [0, 1] (:data:`UNKNOWN` without sized inputs). ``found``: the LLC the run found
    (:class:`simulator.llc_found.LlcFound`, the fraction found at a footprint in bytes), which then decides how much
    of what L2 does not hold is in the LLC, at the footprint (reuse distance + size) times the ``sharing`` ranks;
    without it, what an LRU cache of ``llc_bytes`` (already split among the ranks) holds."""
    total = sum(entry[1] for entry in reuse)
    if not total:
        return UNKNOWN
    warm_from_l2 = total <= l2_bytes
    decay = getattr(found, "decay", None)
    cold = 0.0
    for entry in reuse:
        distance, size = entry[0], entry[1]
        in_l2 = cached_bytes(distance, size, l2_bytes)
        if found is not None:
            in_llc = (size - in_l2) * min(max(found((distance + size) * max(sharing, 1)), 0.0), 1.0)
        else:
            in_llc = cached_bytes(distance, size, llc_bytes) - in_l2
        if decay is not None and len(entry) > 2:   # what the caches lost over the time since its last access
            in_l2, in_llc = in_l2 * decay("l2", entry[2]), in_llc * decay("llc", entry[2])
        cold += (size - in_l2 - in_llc) + (LLC_NOT_L2 * in_llc if warm_from_l2 else 0.0)
    return min(max(cold / total, 0.0), 1.0)


def between(cold_us: np.ndarray, warm_us: np.ndarray, shares: np.ndarray) -> np.ndarray:
    """``(1-f) * warm + f * cold`` per row (µs); a non-positive time falls back to the other model's."""
    cold_us, warm_us = np.asarray(cold_us, dtype=float), np.asarray(warm_us, dtype=float)
    safe_cold = np.where(cold_us > 0, cold_us, np.where(warm_us > 0, warm_us, 1e-9))
    safe_warm = np.where(warm_us > 0, warm_us, safe_cold)
    return (1.0 - shares) * safe_warm + shares * safe_cold


def levels_known(l2_bytes: int | None, llc_bytes: int | None) -> bool:
    return bool(l2_bytes) and bool(llc_bytes) and not math.isnan(float(l2_bytes)) and llc_bytes >= l2_bytes
