"""The run summary of an op sweep: counts, why configs were skipped, and the noise (coefficient of variation,
std / mean over the repetitions of one config) per op, implementation, pass and cache state."""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectors.ops.timer import Timing

MAX_REASONS = 20


@dataclass
class SweepSummary:
    """Accumulates what a sweep did; ``as_dict()`` is stored as collection_runs.summary."""

    sweep: str
    device: str
    timing_environment: dict[str, Any]
    timer_settings: dict[str, Any]
    memory_cap_bytes: int
    configs_planned: int = 0
    configs_resumed: int = 0
    configs_done: int = 0
    rows_written: int = 0
    stats_rows_written: int = 0
    wall_s: float = 0.0
    stopped: str | None = None
    resumed_runs: list[str] = field(default_factory=list)
    rows_resumed: int = 0
    skips: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    reasons: list[str] = field(default_factory=list)
    engine_call_us: list[float] = field(default_factory=list)   # the engine's per-call cost as measured (µs)
    memory_probe: list[dict[str, Any]] = field(default_factory=list)   # collectors.memory_probe, at start and end
    wake_probe: list[dict[str, Any]] = field(default_factory=list)     # collectors.wake_probe, at start and end
    # 'op/implementation': its forward timed after other work (collectors.ops.after_other_work)
    code_away: dict[str, dict[str, Any]] = field(default_factory=dict)
    _cv: dict[tuple[str, str, str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    _median: dict[tuple[str, str, str, str], list[float]] = field(default_factory=lambda: defaultdict(list))

    def resumed(self, runs: list[str], rows: int) -> None:
        """The interrupted runs whose measured rows this run adopted (the run-id chain) and how many rows."""
        self.resumed_runs, self.rows_resumed = list(runs), rows

    def planned(self, items: int, resumed: int) -> None:
        self.configs_planned, self.configs_resumed = items, resumed

    def measured(self, op: str, implementation: str, pass_: str, cache: str, timing: Timing) -> None:
        self._cv[(op, implementation, pass_, cache)].append(timing.cv)
        self._median[(op, implementation, pass_, cache)].append(timing.median_us)

    def skipped(self, op: str, kind: str, reason: str) -> None:
        self.skips[kind] += 1
        if len(self.reasons) < MAX_REASONS:
            self.reasons.append(f"{op}: {reason}")

    def per_op(self) -> list[dict[str, Any]]:
        out = []
        for (op, implementation, pass_, cache), cvs in sorted(self._cv.items()):
            cv = np.asarray(cvs, dtype=float)
            medians = np.asarray(self._median[(op, implementation, pass_, cache)])
            out.append({"op": op, "implementation": implementation, "pass": pass_, "cache_state": cache,
                        "rows": int(cv.size), "cv_median": round(float(np.nanmedian(cv)), 4),
                        "cv_p90": round(float(np.nanpercentile(cv, 90)), 4),
                        "median_us_min": round(float(medians.min()), 3),
                        "median_us_max": round(float(medians.max()), 3)})
        return out

    def as_dict(self) -> dict[str, Any]:
        return {"sweep": self.sweep, "device": self.device, "configs_planned": self.configs_planned,
                "configs_resumed": self.configs_resumed, "configs_done": self.configs_done,
                "rows_written": self.rows_written, "stats_rows_written": self.stats_rows_written,
                "skipped": dict(self.skips), "skip_reasons": list(self.reasons), "stopped": self.stopped,
                "resumed_runs": list(self.resumed_runs), "rows_resumed": self.rows_resumed,
                "wall_s": round(self.wall_s, 2), "memory_cap_bytes": self.memory_cap_bytes,
                "timing_environment": self.timing_environment, "timer_settings": self.timer_settings,
                "per_op": self.per_op(), "engine_call_us": list(self.engine_call_us),
                "memory_probe": list(self.memory_probe), "wake_probe": list(self.wake_probe),
                "code_away": dict(self.code_away)}
