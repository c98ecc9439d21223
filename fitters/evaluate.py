"""Test-split scoring (method.md section 2, through :mod:`pmdb.metrics`) and the hash of the training rows."""
from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import pandas as pd

from pmdb import metrics

# Edges of the relative-error histogram e = (predicted - measured) / measured.
HIST_EDGES = (-np.inf, -0.5, -0.2, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.2, 0.5, np.inf)


def error_histogram(predicted: np.ndarray, actual: np.ndarray) -> dict[str, Any]:
    """Counts of e in the bins of HIST_EDGES, with readable labels ('[-5%, -2%)', ...)."""
    errors = metrics.relative_errors(predicted, actual)
    counts, _ = np.histogram(errors, bins=np.asarray(HIST_EDGES))
    labels = [f"[{_pct(lo)}, {_pct(hi)})" for lo, hi in zip(HIST_EDGES[:-1], HIST_EDGES[1:])]
    return {"edges": [None if not np.isfinite(e) else float(e) for e in HIST_EDGES], "labels": labels,
            "counts": [int(c) for c in counts]}


def _pct(edge: float) -> str:
    return ("-inf" if edge < 0 else "inf") if not np.isfinite(edge) else f"{edge * 100:g}%"


def test_metrics(predicted: np.ndarray, actual: np.ndarray) -> dict[str, float]:
    """GMAE, MAPE, std of |e|, min/max |e| and n over the test rows."""
    return metrics.summary(predicted, actual)


def data_hash(ids: pd.Series | np.ndarray, params: pd.DataFrame, times_us: np.ndarray) -> str:
    """sha256 of the training rows: (row id, model inputs, measured time), in id order."""
    frame = params.reset_index(drop=True).copy()
    frame.insert(0, "_id", np.asarray(ids))
    frame["_t"] = np.asarray(times_us, dtype=float)
    records = frame.sort_values("_id").to_dict(orient="records")
    text = json.dumps(records, sort_keys=True, default=_plain, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _plain(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)
