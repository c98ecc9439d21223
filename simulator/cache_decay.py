"""How much of the warm state survives a while of other work: per cache level, the share (0..1) by elapsed µs.

A kernel microbenchmark's warm repetition follows its own untimed call; inside a step an operand was last touched
some time ago, and on a shared host the caches lose what a process touched while it works on other things, apart
from the bytes it touches itself (the reuse distance, :mod:`simulator.cache_levels`). On the 2-core AMD EPYC host
(32 MiB L3, 2026-11-30, ``benchmarks/busy_wait_decay.py``) a 4 MiB buffer read in 47 µs just touched, 50 µs after
1 ms of a busy loop on a few bytes, 61 after 4 ms and 107 after 16 ms, its flushed time (106); a 256 KiB buffer, in
L2, 4.0, 6.3, 13.3 and 32 µs against 8.9 flushed: a step of 25 ms re-reads its weights as if from memory although
few bytes came between.

The first memory probe of every timed run records these reads (:func:`collectors.memory_probe.decay_curve`, its
``"decay"`` entry). Per probe, level and wait ``w``, with ``t(w)`` the read after the wait and ``F`` the read just flushed::

    survives(w) = clip((F - t(w)) / (F - t(0)), 0, 1)

the share of the way from the flushed to the touched time that the read keeps. A run's curve is the per-wait
median over its probes (the run's own where it recorded them, else the platform's op sweeps', as for
:mod:`simulator.llc_found`); between waits it is interpolated linearly in the wait, from 1 at 0 µs; beyond the
longest it keeps the longest's. Nothing is fitted. Reuse pricing multiplies the bytes an op finds in L2 and in the
LLC by their level's share at the time since the op's operand was last touched (:mod:`pmdb.traces.reuse`). A read
slower than the flushed one (the translations lost too) counts as flushed: the cold microbenchmark sets the ceiling.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from simulator.memory_phase import summary_probes
from simulator.piecewise import linear

LEVELS = ("l2", "llc")


@dataclass(frozen=True)
class CacheDecay:
    """Per level: the surviving share (0..1) at waits (µs, ascending, starting at 0)."""

    waits_us: tuple[float, ...]
    survives: dict[str, tuple[float, ...]]
    probes: int

    def __call__(self, level: str, elapsed_us: float) -> float:
        """The share of ``level``'s warm state left after ``elapsed_us`` (1 for an unknown level or time)."""
        curve = self.survives.get(level)
        if curve is None or not elapsed_us == elapsed_us or elapsed_us <= 0:   # NaN or nothing elapsed
            return 1.0
        return linear(elapsed_us, self.waits_us, curve)

    def label(self) -> str:
        """'L2 1 ms 50%, 4 ms 0%, ...; LLC ...': the share left after each wait."""
        parts = []
        for level in LEVELS:
            if level in self.survives:
                pairs = ", ".join(f"{w / 1e3:g} ms {100 * s:.0f}%" for w, s in
                                  zip(self.waits_us[1:], self.survives[level][1:]))
                parts.append(f"{level.upper()} {pairs}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"waits_us": [float(w) for w in self.waits_us],
                "survives": {k: [round(s, 4) for s in v] for k, v in self.survives.items()}, "probes": self.probes}


def probe_survives(decay: Any) -> tuple[tuple[float, ...], dict[str, list[float]]] | None:
    """One probe's ``"decay"`` entry as (waits µs, {level: surviving shares}); None when missing or unusable."""
    if not isinstance(decay, dict):
        return None
    waits, reads, flushed = decay.get("waits_us"), decay.get("reads_us"), decay.get("flushed_us")
    if not (isinstance(waits, list) and len(waits) >= 2 and isinstance(reads, dict) and isinstance(flushed, dict)):
        return None
    try:
        waits_f = tuple(float(w) for w in waits)
    except (TypeError, ValueError):
        return None
    if waits_f[0] != 0 or any(b <= a for a, b in zip(waits_f, waits_f[1:])):
        return None
    out: dict[str, list[float]] = {}
    for level in LEVELS:
        times, cold = reads.get(level), flushed.get(level)
        if not (isinstance(times, list) and len(times) == len(waits_f) and isinstance(cold, (int, float))):
            continue
        try:
            t = [float(x) for x in times]
        except (TypeError, ValueError):
            continue
        span = float(cold) - t[0]
        if not span > 0:
            continue                                         # flushed no slower than touched: nothing to tell
        out[level] = [min(max((float(cold) - x) / span, 0.0), 1.0) for x in t]
    return (waits_f, out) if out else None


def from_summaries(summaries: Iterable[Any]) -> CacheDecay | None:
    """The per-level, per-wait median over every probe with a ``"decay"`` entry in these run summaries."""
    per: dict[str, list[list[float]]] = {}
    waits: tuple[float, ...] | None = None
    probes = 0
    for summary in summaries:
        for probe in summary_probes(summary, "memory_probe"):
            got = probe_survives(probe.get("decay"))
            if got is None or (waits is not None and got[0] != waits):
                continue
            waits = got[0]
            probes += 1
            for level, shares in got[1].items():
                per.setdefault(level, []).append(shares)
    if waits is None or not per:
        return None
    survives = {level: tuple(float(statistics.median(col)) for col in zip(*rows)) for level, rows in per.items()}
    return CacheDecay(waits, survives, probes)
