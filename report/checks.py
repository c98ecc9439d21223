"""Warnings the report states in words, computed from plain frames: the baseline (sum of kernel times) beating the
model, plans the model cannot tell apart although their measured times differ, fitted collective curves that
jump at a turning point, and a miss against launches that disagree (:func:`unsettled_truth` reads them from the
store). Each function returns sentences (empty when there is nothing to say) or one sentence or None."""
from __future__ import annotations

from typing import Any, Iterable

import numpy as np
import pandas as pd

from collectors.workloads.relaunch import launch_medians
from pmdb.metrics import gmae
from pmdb.store import Store

SAME_PREDICTION = 0.005   # predictions within 0.5% of each other count as the same
MEASURED_APART = 0.10     # ... while measured times more than 10% apart make them indistinguishable plans
JUMP = 0.05               # a fitted curve whose two sides differ by more than 5% at a turning point jumps


def baseline_beats_model(frame: pd.DataFrame, keys: Iterable[str] = ("family", "world_size", "mode")
                         ) -> list[str]:
    """Per group of predictions: a warning when the baseline's geomean |e| is below the model's. ``frame`` has
    predicted_us, measured_us, baseline_us and the ``keys`` columns."""
    out = []
    rows = frame.dropna(subset=["baseline_us"])
    for key, part in rows.groupby(list(keys), sort=False):
        model = gmae(part["predicted_us"], part["measured_us"])
        base = gmae(part["baseline_us"], part["measured_us"])
        if base < model:
            closer = int(((part["baseline_us"] - part["measured_us"]).abs()
                          < (part["predicted_us"] - part["measured_us"]).abs()).sum())
            name = " ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
            out.append(f"{name}: the baseline (sum of kernel times) beats the model: geomean |e| "
                       f"{100 * base:.1f}% against {100 * model:.1f}%; the baseline is closer on {closer} of "
                       f"{len(part)} runs")
    return out


def indistinguishable(frame: pd.DataFrame, group: list[str], label: str, predicted: str = "predicted_us",
                      measured: str = "measured_us", unit: float = 1e3,
                      placement: str | None = None) -> tuple[list[str], set]:
    """Within each group (e.g. one workload shape under one model set), sets of >= 2 rows predicted within 0.5% of
    the set's fastest prediction whose measured times differ by more than 10%: "plans are indistinguishable to the
    model". Returns the sentences and the index labels of the rows concerned. ``unit`` divides the times for the
    sentence (1e3: µs shown as ms). ``placement`` (a column of the tables' ranks): rows that all place the tables
    alike are one configuration measured again, so the sentence says that their measured times differ by noise
    (and they are not flagged)."""
    out: list[str] = []
    flagged: set = set()
    rows = frame.dropna(subset=[predicted, measured])
    for key, part in rows.groupby(group, sort=False, dropna=False):
        part = part.sort_values(predicted)
        done: set = set()
        for anchor in part.index:
            if anchor in done:
                continue
            low = float(part.at[anchor, predicted])
            same = part[(part[predicted] >= low) & (part[predicted] <= low * (1 + SAME_PREDICTION))]
            same = same[~same.index.isin(done)]
            done |= set(same.index)
            if len(same) < 2:
                continue
            lo, hi = float(same[measured].min()), float(same[measured].max())
            if hi <= lo * (1 + MEASURED_APART):
                continue
            name = " ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)) if pd.notna(k))
            plo, phi = float(same[predicted].min()) / unit, float(same[predicted].max()) / unit
            shown = f"{plo:.3g} ms" if phi - plo < 5e-4 * plo else f"{plo:.3g}-{phi:.3g} ms"
            if placement is not None and same[placement].notna().all() and same[placement].nunique() == 1:
                out.append(f"{name}: {', '.join(map(str, same[label]))} make the same plan "
                           f"({same[placement].iloc[0]}): one configuration measured {len(same)} times, "
                           f"{lo / unit:.3g}-{hi / unit:.3g} ms ({100 * (hi / lo - 1):+.0f}%, run-to-run noise); "
                           f"predicted {shown}")
                continue
            flagged |= set(same.index)
            out.append(f"{name}: plans are indistinguishable to the model: {', '.join(map(str, same[label]))} are "
                       f"predicted within 0.5% of each other ({shown}) while measured {lo / unit:.3g}-"
                       f"{hi / unit:.3g} ms ({100 * (hi / lo - 1):+.0f}%)")
    return out, flagged


def curve_jumps(curve, params, mul: float, boundaries: tuple[float, float]) -> list[tuple[float, float, float]]:
    """(boundary bytes, latency just below, latency at it) for each turning point where ``curve(params, mul, m)``
    changes by more than 5%: the fitted model itself is discontinuous there."""
    out = []
    for b in boundaries:
        below, at = (float(v) for v in curve(params, mul, np.array([b * (1 - 1e-9), b])))
        if np.isfinite(below) and np.isfinite(at) and min(below, at) > 0 and \
                abs(at - below) > JUMP * min(below, at):
            out.append((float(b), below, at))
    return out


SPLIT_TRUTH_TARGET = 0.10   # a single-rank run's accuracy target: launches further apart leave the verdict open


def split_truth(label: str, launch_medians_ms: list[float], predicted_ms: float, error: float,
                target: float = SPLIT_TRUTH_TARGET) -> str | None:
    """One warning where a run misses ``target`` against a truth whose launches disagree by more than it: the
    launches' medians (ms) spread over more than ``target`` x their median and the prediction lies among them, so
    whether it is within the target depends on which launches the truth took. None otherwise."""
    if len(launch_medians_ms) < 2 or abs(error) <= target:
        return None
    low, high = min(launch_medians_ms), max(launch_medians_ms)
    middle = float(np.median(launch_medians_ms))
    if middle <= 0 or (high - low) / middle <= target or not low <= predicted_ms <= high:
        return None
    return (f"{label}: its {len(launch_medians_ms)} launches ran {low:.3g}-{high:.3g} ms "
            f"({100 * (high - low) / middle:.0f}% apart) and the prediction, {predicted_ms:.3g} ms, lies among "
            f"them: its {100 * error:+.1f}% is against their median, an unsettled truth")


def unsettled_truth(store: Store, label: str, run_id: Any, predicted_us: float, error: float) -> str | None:
    """:func:`split_truth` of a stored workload run (``run_id``, None or NaN for none; prediction in µs), its
    launches' medians read from the store (:func:`collectors.workloads.relaunch.launch_medians`)."""
    medians_us = launch_medians(store, str(run_id))[0] if isinstance(run_id, str) and run_id else []
    return split_truth(label, [m / 1e3 for m in medians_us], predicted_us / 1e3, error)

