"""Rows of ``collective_measurements`` (measured and imported alike) and their all-or-nothing write.

Row convention (documented in the schema): measured sweeps store one row per rank (``rank`` = r: that rank's
latency statistics over iterations) and one aggregated row (``rank`` NULL: per iteration the slowest rank, then
statistics over iterations). Imports store the source's own aggregate as ``rank`` NULL rows. Curves and fits read
the ``rank IS NULL`` rows.
"""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from collectors.comms.bus import MessageSizes, bandwidths
from pmdb.store import Store

TABLE = "collective_measurements"


def latency_stats(latencies_us: Sequence[float] | np.ndarray) -> dict[str, float]:
    """p50, mean, p95, min and max (µs) over iterations."""
    values = np.asarray(latencies_us, dtype=float)
    if values.size == 0 or not np.all(np.isfinite(values)):
        raise ValueError("latencies must be a non-empty array of finite numbers")
    return {"lat_p50_us": float(np.percentile(values, 50)), "lat_mean_us": float(values.mean()),
            "lat_p95_us": float(np.percentile(values, 95)),
            "lat_min_us": float(values.min()), "lat_max_us": float(values.max())}


def _finite_or_none(value: Any) -> Any:
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def make_row(*, run_id: str, platform: str, collective: str, backend: str, world_size: int, sizes: MessageSizes,
             split_kind: str, latency: Mapping[str, float | None], source: str, dtype: str | None,
             in_place: bool | None, rank: int | None = None, iterations: int | None = None,
             warmup: int | None = None, threads_per_rank: int | None = None, source_file: str | None = None,
             algbw_gbps: float | None = None, busbw_gbps: float | None = None) -> dict[str, Any]:
    """One ``collective_measurements`` row. Bandwidths default to max_rank_bytes / lat_p50 (times the bus factor)."""
    p50 = latency["lat_p50_us"]
    algbw, busbw = bandwidths(collective, world_size, sizes.max_rank_bytes, p50)
    return {
        "run_id": run_id, "platform": platform, "collective": collective, "backend": backend,
        "world_size": int(world_size), "dtype": dtype, "in_place": in_place, "split_kind": split_kind,
        "rank": rank, "total_bytes": sizes.total_bytes, "bytes_per_rank": sizes.bytes_per_rank,
        "max_rank_bytes": sizes.max_rank_bytes, "sent_bytes": sizes.sent_bytes, "recv_bytes": sizes.recv_bytes,
        "iterations": iterations, "warmup": warmup, "threads_per_rank": threads_per_rank,
        "lat_p50_us": float(p50), "lat_mean_us": _finite_or_none(latency.get("lat_mean_us")),
        "lat_p95_us": _finite_or_none(latency.get("lat_p95_us")),
        "lat_min_us": _finite_or_none(latency.get("lat_min_us")),
        "lat_max_us": _finite_or_none(latency.get("lat_max_us")),
        "algbw_gbps": _finite_or_none(algbw if algbw_gbps is None else algbw_gbps),
        "busbw_gbps": _finite_or_none(busbw if busbw_gbps is None else busbw_gbps),
        "source": source, "source_file": source_file,
    }


def write_atomic(store: Store, tables: Iterable[tuple[str, Sequence[Mapping[str, Any]]]]) -> dict[str, int]:
    """Insert rows into several tables in ONE transaction: all of them or none. Returns rows per table."""
    counts: dict[str, int] = {}
    with store.transaction():
        for table, rows in tables:
            if not rows:
                counts[table] = counts.get(table, 0)
                continue
            frame = pd.DataFrame([dict(r) for r in rows]).astype(object)
            store.insert(table, frame.where(frame.notna(), None))  # joins this transaction
            counts[table] = counts.get(table, 0) + len(frame)
    return counts
