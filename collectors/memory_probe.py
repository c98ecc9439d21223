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
"""
from __future__ import annotations

import mmap
import statistics
import time
from datetime import datetime, timezone
from typing import Any

import numpy as np
import torch

PROBE_BYTES = 64 * 2 ** 20   # beyond what one process finds of a shared LLC (~32-64 MiB on the Intel host)
READS = 5


def read_probe(nbytes: int = PROBE_BYTES, reads: int = READS) -> dict[str, Any]:
    """One probe: the median time (µs) of ``reads`` sums over a float32 buffer of ``nbytes`` read just before, on one
    thread (the caller's thread count is restored)."""
    if nbytes < 4 or reads < 1:
        raise ValueError("a probe needs at least 4 bytes and one read")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    # mapped apart from the heap and unmapped after: under pmdb's allocator settings (collectors.workloads.allocator)
    # a heap block is never given back, and 64 MiB of free heap would let `collect ops`' memory cap (a bound on the
    # data segment's growth) pass configs that need more, and change a workload's heap
    mapped = mmap.mmap(-1, nbytes - nbytes % 4)
    try:
        array = np.frombuffer(mapped, dtype=np.float32)
        array.fill(1.0)
        buffer = torch.from_numpy(array)
        buffer.sum()
        times = []
        for _ in range(reads):
            start = time.perf_counter_ns()
            buffer.sum()
            times.append((time.perf_counter_ns() - start) / 1e3)
        del buffer, array
    finally:
        torch.set_num_threads(threads)
        mapped.close()
    return {"bytes": int(nbytes), "read_us": round(float(statistics.median(times)), 1),
            "at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
