"""Storing the simulator tests' recordings (a module with a unique name: test files import it directly, which a
module named ``conftest`` cannot guarantee when several test folders run together)."""
from __future__ import annotations

from pathlib import Path

from collectors.traces.ingest import RankTraces, ingest_trace_set
from pmdb.store import Store


def ingest(store: Store, platform: str, ranks: list[RankTraces], label: str, source: str,
           workload_id: int | None = None) -> int:
    """Store ``ranks`` as one trace set under a trace run of its own; returns the trace set id."""
    with store.run("trace", platform, {"label": label}) as run:
        return ingest_trace_set(store, run.run_id, platform, ranks, label=label, source=source,
                                workload_id=workload_id)


def cpu_ranks(directory: Path) -> list[RankTraces]:
    """Both ranks' Kineto and ET files of the 2-rank CPU recording."""
    return [RankTraces(r, directory / f"kineto_{r}.json", directory / f"et_{r}.json") for r in (0, 1)]
