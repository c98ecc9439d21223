"""The host's memory pace at one moment: the time of one read of a buffer larger than the cache a process finds (µs).

On a shared host a training step slows and speeds up with its neighbours' use of memory, within minutes, while the
sweep's op shapes (operands in L2, or flushed and read once) barely move: on the 2-core Intel Xeon host (lscpu L3
480 MiB) the demo's bert step moved x1.34 between its slowest and fastest quarter of 6-second windows over 15
minutes, a read of a 64 MiB buffer x1.37 with it (rank correlation +0.75), the step's own op shapes x1.12-1.15
(``benchmarks/host_phase.py``, benchmarks/results/host_phase_*). A truth measured in a slow phase and priced from
microbenchmarks taken in a fast one can be off by the phase, not by the model.

So every timed run records this probe when it starts and when it ends: ``collect ops`` (the sweep and each round
of traced shapes) and every launch of ``collect workload`` (rank 0, before its warm-up and after its timed
iterations, outside both). It reads :data:`PROBE_BYTES` once to touch it, then times :data:`READS` more reads on one
thread and keeps their median; what is stored is ``{"bytes", "read_us", "at"}``. The comparison of a truth's probes
with its prices' lives in :mod:`simulator.memory_phase`. About 0.1 s per probe (a 64 MiB allocation and six reads).

**The LLC the process finds** (``"llc"``, the runs' probes since 2026-11-29): on a shared host the share of the
last-level cache a process finds moves with its neighbours, and sysfs gives only the whole (480 MiB on the Intel
host, where a 64 MiB buffer re-read at LLC pace in a fast phase and at DRAM pace in a slow one). With it a probe
times reads of 16, 64 and 256 MiB just touched and of the 64 MiB buffer just flushed from every cache level (the
DRAM reference), all prefixes of one buffer; :mod:`simulator.llc_found` turns them into the fraction of a re-read
buffer found in the LLC, per size. About 0.3 s more (2026-11-29, Intel host: 16 MiB x4 2.4-2.6 ms, 64 MiB 2.8-3.4 ms, flushed 5.3 ms, 256 MiB
/ 4 5.7 ms); a whole probe with its curve 0.55-0.68 s on the 48 MiB-L3 Intel host when each size had its own
buffer, see :func:`_read_times` for one buffer.
"""
from __future__ import annotations

import mmap
import statistics
import time
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np
import torch

from collectors.ops import cache_evict

PROBE_BYTES = 64 * 2 ** 20   # beyond what one process finds of a shared LLC (~32-64 MiB on the Intel host)
READS = 5
LLC_SIZES = (16 * 2 ** 20, PROBE_BYTES, 256 * 2 ** 20)   # the LLC curve's reads (bytes); the first is its reference
CURVE_READS = 3
DECAY_SIZES = {"l2": 256 * 2 ** 10, "llc": 4 * 2 ** 20}   # a buffer L2 holds, one only the LLC holds (bytes)
DECAY_WAITS_US = (0, 1000, 4000, 16000)                  # busy time between the touch and the read (µs)
DECAY_READS = 3


def _mapped(nbytes: int) -> tuple[mmap.mmap, np.ndarray]:
    """A float32 buffer of ``nbytes`` filled with ones, mapped apart from the heap (the caller closes the map)."""
    # mapped apart from the heap and unmapped after: under pmdb's allocator settings (collectors.workloads.allocator)
    # a heap block is never given back, and 64 MiB of free heap would let `collect ops`' memory cap (a bound on the
    # data segment's growth) pass configs that need more, and change a workload's heap
    mapped = mmap.mmap(-1, nbytes - nbytes % 4)
    array = np.frombuffer(mapped, dtype=np.float32)
    array.fill(1.0)
    return mapped, array


def _read_times(buffer: torch.Tensor, nbytes: int, reads: int,
                before: Callable[[torch.Tensor], None] | None = None) -> list[float]:
    """µs of ``reads`` sums over the first ``nbytes`` of ``buffer``, read once before (``before(view)`` runs before
    each timed read). A prefix of one filled mapping serves every size: filling a fresh 256 MiB map took ~0.17 s
    on the 48 MiB-L3 Intel host, most of a probe."""
    view = buffer[:nbytes // 4]
    view.sum()
    times = []
    for _ in range(reads):
        if before is not None:
            before(view)
        start = time.perf_counter_ns()
        view.sum()
        times.append((time.perf_counter_ns() - start) / 1e3)
    return times


def llc_curve(buffer: torch.Tensor, reads: int = CURVE_READS) -> dict[str, Any] | None:
    """The reads of :data:`LLC_SIZES` (prefixes of ``buffer``, at least the largest long) just touched and of the
    probe's buffer just flushed from every cache level (``cache_evict``): ``{"sizes", "reads_us", "flushed_bytes",
    "flushed_us"}``, medians in µs; None where no flush helper loads."""
    evictor = cache_evict.load()
    if evictor is None:
        return None
    touched = [round(float(statistics.median(_read_times(buffer, size, reads))), 1) for size in LLC_SIZES]
    flushed = _read_times(buffer, PROBE_BYTES, reads, lambda b: evictor.evict([(b.data_ptr(), b.numel() * 4)]))
    return {"sizes": list(LLC_SIZES), "reads_us": touched, "flushed_bytes": PROBE_BYTES,
            "flushed_us": round(float(statistics.median(flushed)), 1)}


def busy_wait(us: float) -> None:
    """Keep the core busy for ``us`` µs on a few bytes (a step's core is busy too: the wait is not an idle one)."""
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        pass


def decay_curve(buffer: torch.Tensor, reads: int = DECAY_READS) -> dict[str, Any] | None:
    """How long what a process touched stays in its caches while it works on other things: per level of
    :data:`DECAY_SIZES` (a prefix of ``buffer``), the read just touched and then the core kept busy for each of
    :data:`DECAY_WAITS_US` (on a few bytes), and the read just flushed from every cache level (``cache_evict``):
    ``{"waits_us", "sizes", "reads_us": {level: [...]}, "flushed_us": {level: ...}}``, medians in µs; None where no
    flush helper loads. :mod:`simulator.cache_decay` turns them into the share of the warm state that survives.
    About 0.15 s. On the 2-core AMD EPYC host (32 MiB L3, 2026-11-30) a 4 MiB buffer read in 47 µs just touched,
    50 after 1 ms, 61 after 4 ms and 107 after 16 ms, about its flushed time (106); a 256 KiB one 4.0, 6.3, 13.3 and
    32 µs against 8.9 flushed (``benchmarks/busy_wait_decay.py``)."""
    evictor = cache_evict.load()
    if evictor is None:
        return None
    out: dict[str, Any] = {"waits_us": list(DECAY_WAITS_US), "sizes": {}, "reads_us": {}, "flushed_us": {}}
    for level, nbytes in DECAY_SIZES.items():
        view = buffer[:nbytes // 4]
        per_wait = []
        for wait in DECAY_WAITS_US:
            times = _read_times(view, nbytes, reads, lambda b, wait=wait: (b.sum(), busy_wait(wait)))
            per_wait.append(round(float(statistics.median(times)), 1))
        flushed = _read_times(view, nbytes, reads, lambda b: evictor.evict([(b.data_ptr(), b.numel() * 4)]))
        out["sizes"][level] = nbytes
        out["reads_us"][level] = per_wait
        out["flushed_us"][level] = round(float(statistics.median(flushed)), 1)
    return out


def read_probe(nbytes: int = PROBE_BYTES, reads: int = READS, curve: bool = False,
               decay: bool = False) -> dict[str, Any]:
    """One probe: the median time (µs) of ``reads`` sums over a float32 buffer of ``nbytes`` read just before, on one
    thread (the caller's thread count is restored); ``curve``: with the LLC curve (:func:`llc_curve`, ~0.3 s more)
    under ``"llc"``; ``decay`` (with ``curve``): and the caches' decay over time (:func:`decay_curve`, ~0.15 s
    more) under ``"decay"``."""
    if nbytes < 4 or reads < 1:
        raise ValueError("a probe needs at least 4 bytes and one read")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    mapped, array = _mapped(max(nbytes, *LLC_SIZES) if curve else nbytes)
    try:
        buffer = torch.from_numpy(array)
        times = _read_times(buffer, nbytes, reads)
        found = llc_curve(buffer) if curve else None
        decayed = decay_curve(buffer) if curve and decay else None
        del buffer
    finally:
        del array
        mapped.close()
        torch.set_num_threads(threads)
    out: dict[str, Any] = {"bytes": int(nbytes), "read_us": round(float(statistics.median(times)), 1),
                           "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    if found is not None:
        out["llc"] = found
    if decayed is not None:
        out["decay"] = decayed
    return out
