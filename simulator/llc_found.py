"""The last-level cache a run found: per buffer size, the fraction of a re-read buffer found there (0..1).

sysfs gives a host's whole LLC; on a shared host a process finds a share of it that moves with its neighbours. On
the 2-core Intel Xeon host (lscpu L3 480 MiB) a 64 MiB buffer re-read just touched took 2.6-3.4 ms in a fast phase
(near the LLC pace of a 16 MiB one, x4) and ~7 ms in a slow one, and a 256 MiB buffer read at DRAM pace in both.
Every timed run records the reads of :data:`collectors.memory_probe.LLC_SIZES` just touched and of the 64 MiB
buffer just flushed from every cache (its ``"llc"`` probes). Per probe and size S, with ``t(S)`` its touched read,
``L`` the smallest size's time per byte (the LLC pace) and ``D`` the flushed read's (the DRAM pace)::

    found(S) = clip((D*S - t(S)) / ((D - L)*S), 0, 1)

the share of its bytes read at LLC rather than DRAM pace (the smallest size: 1 by construction). A run's curve is
the per-size median over its probes; between sizes it is interpolated on log2 of the size, below the smallest it
is 1, beyond the largest it keeps the largest's value, and beyond the sysfs LLC it is 0. Nothing is fitted.
Reuse pricing (:mod:`simulator.cache_levels`: ``--cache-state reuse``, and a CPU's default wherever a curve was
recorded) finds an operand byte in the LLC with this fraction at its reuse distance plus its storage's size, in
place of "all of it while the sysfs LLC holds it" (LRU). The run's own probes are used where it has them, else the
platform's ``collect ops`` runs' (the prices' moment). It also carries, where measured, what the caches keep over
time (:mod:`simulator.cache_decay`, the run's probes else the sweeps') and what a forward call pays for its code
path away (:mod:`simulator.code_away`, the sweeps'), which reuse pricing reads beside it.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any, Iterable

from pmdb.store import Store
from simulator import cache_decay, code_away
from simulator.cache_decay import CacheDecay
from simulator.code_away import CodeAway
from simulator.memory_phase import run_summaries, summary_probes, sweep_summaries
from simulator.piecewise import linear


@dataclass(frozen=True)
class LlcFound:
    """Found fractions (0..1) at buffer sizes (bytes, ascending); ``llc_bytes`` the sysfs LLC (None: unknown)."""

    sizes: tuple[float, ...]
    found: tuple[float, ...]
    probes: int
    source: str                # 'run' (the truth's own probes) or 'ops' (the platform's sweeps)
    llc_bytes: float | None = None
    decay: CacheDecay | None = None   # what survives a while of other work (simulator.cache_decay), where probed
    code_away: CodeAway | None = None  # a call's cost for its code path away (simulator.code_away), where timed

    def __call__(self, nbytes: float) -> float:
        """The fraction found at a reuse footprint of ``nbytes``."""
        if self.llc_bytes and nbytes > self.llc_bytes:
            return 0.0
        if nbytes <= self.sizes[0]:
            return self.found[0]
        return linear(math.log2(nbytes), [math.log2(s) for s in self.sizes], self.found)   # linear in log2 bytes

    def with_llc(self, llc_bytes: float | None) -> "LlcFound":
        return replace(self, llc_bytes=llc_bytes)

    def with_decay(self, decay: CacheDecay | None) -> "LlcFound":
        return replace(self, decay=decay)

    def with_code_away(self, code_away: CodeAway | None) -> "LlcFound":
        return replace(self, code_away=code_away)

    def label(self) -> str:
        """'16 MiB 100%, 64 MiB 85%, 256 MiB 0%'."""
        return ", ".join(f"{int(s) // 2 ** 20} MiB {100 * f:.0f}%" for s, f in zip(self.sizes, self.found))

    def to_json(self) -> dict[str, Any]:
        """What a prediction records of it: the sizes (bytes), found fractions, probes and whose they were."""
        out = {"sizes": [int(s) for s in self.sizes], "found": [round(f, 4) for f in self.found],
               "probes": self.probes, "source": self.source}
        if self.decay is not None:
            out["decay"] = self.decay.to_json()
        if self.code_away is not None:
            out["code_away"] = self.code_away.to_json()
        return out

    def sentence(self) -> str:
        whose = "this run's" if self.source == "run" else "the platform's op sweeps'"
        said = (f"ops priced by reuse distance in the LLC found by {whose} {self.probes} memory probes (share of a "
                f"re-read buffer found there: {self.label()})")
        if self.decay is not None:
            said += f"; warm state left after other work: {self.decay.label()}"
        if self.code_away is not None:
            said += f"; forward calls pay their code path away: {self.code_away.label()}"
        return said


def probe_found(llc: Any) -> dict[float, float] | None:
    """One probe's ``"llc"`` entry as {size bytes: found fraction}; None when it is missing or unusable."""
    if not isinstance(llc, dict):
        return None
    sizes, reads, flushed = llc.get("sizes"), llc.get("reads_us"), llc.get("flushed_us")
    if not (isinstance(sizes, list) and isinstance(reads, list) and len(sizes) == len(reads) >= 2
            and isinstance(flushed, (int, float)) and flushed > 0):
        return None
    try:
        pairs = sorted((float(s), float(t)) for s, t in zip(sizes, reads))
        flushed_bytes = float(llc.get("flushed_bytes", 64 * 2 ** 20))
    except (TypeError, ValueError):
        return None
    if any(s <= 0 or t <= 0 for s, t in pairs) or not flushed_bytes > 0:
        return None
    llc_pace = pairs[0][1] / pairs[0][0]                      # µs per byte at the smallest size
    dram_pace = float(flushed) / flushed_bytes
    if dram_pace <= llc_pace:
        return None                                          # no LLC to tell apart from DRAM
    return {s: min(max((dram_pace * s - t) / ((dram_pace - llc_pace) * s), 0.0), 1.0) for s, t in pairs}


def from_summaries(summaries: Iterable[Any], source: str) -> LlcFound | None:
    """The per-size median curve over every probe with an ``"llc"`` entry in these run summaries (JSON or dicts)."""
    per_size: dict[float, list[float]] = {}
    probes = 0
    for summary in summaries:
        for probe in summary_probes(summary, "memory_probe"):
            found = probe_found(probe.get("llc"))
            if found is None:
                continue
            probes += 1
            for size, value in found.items():
                per_size.setdefault(size, []).append(value)
    if not probes:
        return None
    sizes = tuple(sorted(s for s, v in per_size.items() if len(v) * 2 >= probes))   # sizes most probes hold
    if len(sizes) < 2:
        return None
    return LlcFound(sizes, tuple(float(statistics.median(per_size[s])) for s in sizes), probes, source)


def run_llc_found(store: Store, workload_run_id: str | None, platform: str,
                  llc_bytes: float | None = None) -> LlcFound | None:
    """The LLC a workload run found (its own probes), else the one the platform's completed op sweeps found; None
    where neither recorded it (runs before 2026-11-29, GPU platforms, hosts without a cache-line flush)."""
    own = run_summaries(store, workload_run_id) if workload_run_id else []   # read once: the curve and the decay
    found, decay = from_summaries(own, "run"), cache_decay.from_summaries(own)
    sweeps = sweep_summaries(store, platform)
    found = found if found is not None else from_summaries(sweeps, "ops")
    decay = decay if decay is not None else cache_decay.from_summaries(sweeps)
    if found is None:
        return None
    return found.with_llc(llc_bytes).with_decay(decay).with_code_away(code_away.from_summaries(sweeps))


def run_found(store: Store, workload_run_id: str | None) -> LlcFound | None:
    """The LLC a run's own probes found (no fallback, no sysfs bound); None where it recorded none."""
    return from_summaries(run_summaries(store, workload_run_id), "run") if workload_run_id else None

