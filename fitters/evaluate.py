"""Test-split scoring (method.md section 2, through :mod:`pmdb.metrics`), the test rows' replicate noise floor and
the hash of the training rows."""
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


def replicate_gmae(store: Any, measurement_ids: pd.Series | np.ndarray) -> float:
    """The noise floor of the given op measurements (a fit's test rows): how far a repetition lies from its row's
    median, as a GMAE over the rows. Rows store their statistics, not every repetition, so each row contributes the
    RMS relative deviation of its repetitions from their median, exact from the stored mean, sample std, median and
    count: sqrt((n-1)/n std^2 + (mean - median)^2) / median. Their geometric mean (GMAE's epsilon added) is at most
    the GMAE of each repetition against its median, never below it (Jensen). NaN when no row has two repetitions
    and a std (imported tables often have none)."""
    ids = [int(i) for i in np.asarray(measurement_ids)]
    if not ids:
        return float("nan")
    frame = store.query("SELECT median_us, mean_us, std_us, repetitions FROM op_measurements "
                        "WHERE list_contains(?::BIGINT[], measurement_id)", [ids])
    frame = frame.dropna()
    frame = frame[(frame["repetitions"] >= 2) & (frame["median_us"] > 0)]
    if frame.empty:
        return float("nan")
    n = frame["repetitions"].to_numpy(dtype=float)
    spread = np.sqrt((n - 1) / n * frame["std_us"].to_numpy(dtype=float) ** 2
                     + (frame["mean_us"] - frame["median_us"]).to_numpy(dtype=float) ** 2)
    relative = spread / frame["median_us"].to_numpy(dtype=float)
    return metrics.gmae_of_abs(relative)


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
