"""How a stored trace set was recorded, beyond its rows: the intra-op threads per rank, and the unprofiled iteration
time given at import (µs). Both are NULL where nobody said (migration 0007)."""
from __future__ import annotations

import pandas as pd

from pmdb.store import Store


def _number(value: object) -> float | None:
    """A stored number as float; None for NULL / NaN."""
    return None if value is None or pd.isna(value) else float(value)


def _value(store: Store, sql: str, params: list) -> float | None:
    return _number(store.scalar(sql, params))


def recorded_threads(store: Store, trace_set_id: int, info: dict | None = None) -> int | None:
    """Intra-op threads per rank the trace set was recorded with: stored with the set (imported traces), else those
    of the latest completed workload run of its workload on its platform (captured traces); None when unknown.
    ``info``: the set's row when already read (:func:`pmdb.traces.set_rows.trace_set_info`), saving a query."""
    if info is not None and "threads" in info:
        stored = _number(info["threads"])
    else:
        stored = _value(store, "SELECT threads FROM trace_sets WHERE trace_set_id = ?", [int(trace_set_id)])
    if stored is not None:
        return int(stored)
    run = _value(store, "SELECT w.threads FROM v_workload_runs w JOIN trace_sets s ON s.workload_id = w.workload_id "
                        "AND s.platform = w.platform WHERE s.trace_set_id = ? AND w.threads IS NOT NULL "
                        "ORDER BY w.finished_at DESC LIMIT 1", [int(trace_set_id)])
    return None if run is None else int(run)


def given_measured_us(store: Store, trace_set_id: int) -> float | None:
    """The unprofiled iteration time given at import (``collect trace --measured-ms``), µs; None when not given."""
    return _value(store, "SELECT given_measured_us FROM trace_sets WHERE trace_set_id = ?", [int(trace_set_id)])
