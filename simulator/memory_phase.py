"""A truth's memory pace against its prices': the host's memory phase when a step was measured, relative to when
the microbenchmarks that priced it were taken (collectors.memory_probe; read times in µs).

``truth_us`` is the median of the probes recorded with the workload run (rank 0 of every launch, before and after
its iterations), ``prices_us`` the median over every completed ``collect ops`` run of the platform (the sweep and the
rounds of traced shapes, at their start and end). ``ratio`` = truth / prices: above 1 the truth was measured while
memory was slower than when the prices were taken. On the Intel host a step moved about as much as this read did
(benchmarks/results/host_phase_*: slowest over fastest quarter of windows x1.34 and x1.37 for bert), so a
prediction off by about the ratio may have been off by the host's phase; near 1, the error is not a phase between
truth and prices (the demos of 2026-11-29 03:38 / 03:44: x0.94-1.08 for every run, transformers still 10-24% over,
the fast host's LLC holding what the cold prices put in DRAM: benchmarks/results/host_op_diagnosis_*). Nothing is
corrected by it. Runs recorded before the probe existed give None.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any, Callable

from collectors.memory_probe import PROBE_BYTES
from pmdb.store import Store


SAME_PHASE = 0.1   # |ratio - 1| within this: one phase (two demos in one phase throughout gave x0.94-1.08 per run)


@dataclass(frozen=True)
class Pace:
    """Median probe times (µs) of a truth and of its prices, and their ratio (above 1: slower at the truth)."""

    truth_us: float
    prices_us: float
    truth_probes: int
    prices_probes: int

    @property
    def ratio(self) -> float:
        return self.truth_us / self.prices_us

    @property
    def same_phase(self) -> bool:
        """Within :data:`SAME_PHASE` of 1: the host was in one phase at the truth and at its prices."""
        return abs(self.ratio - 1.0) <= SAME_PHASE

    def label(self) -> str:
        """'x1.25'."""
        return f"x{self.ratio:.2f}"


@dataclass(frozen=True)
class MemoryPace(Pace):
    """The read times of a 64 MiB buffer (:data:`PROBE_BYTES`)."""

    def sentence(self) -> str:
        """One sentence for people: what was measured, and what it says of the error (:data:`SAME_PHASE`)."""
        measured = (f"memory pace {self.label()}: a {PROBE_BYTES // 2 ** 20} MiB read took "
                    f"{self.truth_us / 1e3:.2f} ms around this run's truth ({self.truth_probes} probes) and "
                    f"{self.prices_us / 1e3:.2f} ms around the op sweeps that priced it ({self.prices_probes})")
        if self.same_phase:
            return (f"{measured}: the memory was in the same phase at both, so the error is not a phase of the "
                    f"host between truth and prices")
        return (f"{measured}; on a shared host steps slow and speed up with it (benchmarks/host_phase.py): an error "
                f"of that order may be the host's phase, not the model's")

    def to_json(self) -> dict[str, Any]:
        return {"memory_truth_read_us": self.truth_us, "memory_prices_read_us": self.prices_us,
                "memory_pace": round(self.ratio, 4)}


def summary_field(summary: Any, key: str) -> Any:
    """The value under ``key`` of a run summary (JSON text or a dict); None when it has none or is not JSON."""
    if isinstance(summary, str):
        try:
            summary = json.loads(summary)
        except ValueError:
            return None
    return summary.get(key) if isinstance(summary, dict) else None


def summary_probes(summary: Any, key: str) -> list[dict[str, Any]]:
    """The probe records under ``key`` of a run summary (JSON text or a dict): the dicts of its list, or none."""
    probes = summary_field(summary, key)
    return [p for p in probes if isinstance(p, dict)] if isinstance(probes, list) else []


def read_times(summary: Any) -> list[float]:
    """The probe read times (µs) a run summary holds (JSON text or a dict), of the probe's own size only."""
    out = []
    for probe in summary_probes(summary, "memory_probe"):
        if probe.get("bytes") == PROBE_BYTES:
            value = probe.get("read_us")
            if isinstance(value, (int, float)) and value > 0:
                out.append(float(value))
    return out


def run_summaries(store: Store, run_id: str) -> list[Any]:
    """The summaries (JSON text) of one run and of its completed relaunches (`pmdb collect relaunch`, whose launches
    are part of its ground truth): where the probes taken with its truth are stored."""
    from collectors.workloads.relaunch import relaunch_ids

    ids = [run_id, *relaunch_ids(store, run_id)]
    frame = store.query("SELECT run_id, summary FROM collection_runs WHERE list_contains(?, run_id)", [ids])
    by_id = dict(zip(frame["run_id"], frame["summary"]))
    return [by_id[r] for r in ids if r in by_id]


def measured_platforms(store: Store, run_ids: list[Any]) -> dict[str, str]:
    """{workload run id: the platform its truth was measured on} of the given ids (others, and None, left out)."""
    runs = [str(r) for r in run_ids if isinstance(r, str)]
    if not runs:
        return {}
    return dict(store.query("SELECT run_id, platform FROM workload_runs WHERE list_contains(?, run_id)",
                            [runs]).itertuples(index=False, name=None))


def frame_rows(store: Store, frame: Any, prices_of: Callable[[Store, str], Any],
               pace_of: Callable[[Store, str, str, Any], Any]) -> list[Any]:
    """``pace_of(store, run id, platform, prices)`` of every row of a predictions frame (columns
    ``workload_run_id``, ``platform``), None where its truth was not measured on that platform (imported, or
    predicted for another); ``prices_of(store, platform)`` read once per platform."""
    measured_on = measured_platforms(store, list(frame["workload_run_id"]))
    prices: dict[str, Any] = {}
    out: list[Any] = []
    for run_id, platform in zip(frame["workload_run_id"], frame["platform"]):
        if measured_on.get(run_id) != platform:
            out.append(None)
            continue
        if platform not in prices:
            prices[platform] = prices_of(store, platform)
        out.append(pace_of(store, run_id, platform, prices[platform]))
    return out


def frame_memory_paces(store: Store, frame: Any) -> list[MemoryPace | None]:
    """The memory pace of every row of a predictions frame (:func:`frame_rows`)."""
    return frame_rows(store, frame, price_times, memory_pace)


def sweep_summaries(store: Store, platform: str) -> list[Any]:
    """The summaries of every completed ``collect ops`` run of the platform: the probes its prices were taken with."""
    return store.query("SELECT summary FROM collection_runs WHERE kind = 'ops' AND status = 'completed' "
                       "AND platform = ?", [platform])["summary"].tolist()


def truth_times(store: Store, workload_run_id: str) -> list[float]:
    """The probes recorded with one workload run (µs)."""
    return [t for summary in run_summaries(store, workload_run_id) for t in read_times(summary)]


def price_times(store: Store, platform: str) -> list[float]:
    """The probes of every completed ``collect ops`` run of the platform (µs)."""
    return [t for summary in sweep_summaries(store, platform) for t in read_times(summary)]


def memory_pace(store: Store, workload_run_id: str | None, platform: str,
                prices: list[float] | None = None) -> MemoryPace | None:
    """The truth's memory pace against its prices', None where either has no probe. ``prices``: the platform's
    :func:`price_times`, when the caller judges several runs of it (read here otherwise)."""
    if not workload_run_id:
        return None
    truth = truth_times(store, workload_run_id)
    prices = price_times(store, platform) if prices is None and truth else prices
    if not truth or not prices:
        return None
    return MemoryPace(float(statistics.median(truth)), float(statistics.median(prices)), len(truth), len(prices))
