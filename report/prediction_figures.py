"""Report plots from stored predictions: predicted vs measured (with the measured spread) per workload (like the
paper's Fig. 10/11) and the per-rank, per-stream time breakdown. Functions take a store and an output directory
and return the files written; ``platform`` keeps the predictions made for that target platform only (None: every
platform)."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from pmdb.metrics import gmae  # noqa: E402
from pmdb.store import Store  # noqa: E402

_LATEST = """
WITH per_iteration AS (
    SELECT run_id, iteration, max(time_us) AS time_us FROM e2e_measurements GROUP BY run_id, iteration),
spread AS (
    SELECT run_id, quantile_cont(time_us, 0.1) AS p10_us, quantile_cont(time_us, 0.9) AS p90_us,
           count(*) AS iterations
    FROM per_iteration GROUP BY run_id)
SELECT e.*, w.spread, s.p10_us, s.p90_us, s.iterations, CAST(k.sharding AS VARCHAR) AS placement,
       r.range_low_us, r.range_high_us
FROM v_prediction_errors e
JOIN predictions r ON r.prediction_id = e.prediction_id
LEFT JOIN workload_runs w ON w.run_id = e.workload_run_id
LEFT JOIN spread s ON s.run_id = e.workload_run_id
LEFT JOIN trace_sets t ON t.trace_set_id = e.trace_set_id
LEFT JOIN workloads k ON k.workload_id = t.workload_id
WHERE (? IS NULL OR e.mode = ?) AND (? IS NULL OR e.platform = ?) AND NOT e.in_sample AND NOT e.self_priced
ORDER BY e.family, e.world_size, e.workload, e.batch_size, e.sharder, e.prediction_id
"""
SAME_SHAPE = ["platform", "family", "workload", "batch_size", "world_size", "mode", "model_set_id"]  # plans compared


def label(row: pd.Series) -> str:
    """'workload bB wsN [sharder]' (the sharder only where there are ranks to shard over)."""
    parts = [str(row["workload"])]
    if pd.notna(row.get("batch_size")):
        parts.append(f"b{int(row['batch_size'])}")
    parts.append(f"ws{int(row['world_size'])}")
    if pd.notna(row.get("sharder")) and row["sharder"] and int(row["world_size"]) > 1:
        parts.append(str(row["sharder"]))
    return " ".join(parts)


def latest(store: Store, mode: str | None, platform: str | None) -> pd.DataFrame:
    """The latest held-out (not in-sample) prediction per trace set, mode, model set and target platform with
    ground truth, with the measured run's spread: ``p10_us``/``p90_us`` of the per-iteration max over ranks
    (e2e_measurements) and ``spread`` = (p90 - p10) / median as the run stored it; ``label`` names the run (with its
    target platform when the frame holds several)."""
    frame = store.query(_LATEST, [mode, mode, platform, platform])
    several = frame["platform"].nunique() > 1
    frame["label"] = [label(r) + (f" @{r['platform']}" if several else "") for _, r in frame.iterrows()]
    return frame


def measured_range(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(below, above) the measured time in µs: to p10 and p90 of the run's iterations, else ± spread / 2 of the
    measured median, else 0."""
    meas = frame["measured_us"].to_numpy(dtype=float)
    half = (frame["spread"].astype(float).fillna(0.0).to_numpy() / 2) * meas
    below = np.where(frame["p10_us"].notna(), meas - frame["p10_us"].astype(float).fillna(0.0), half)
    above = np.where(frame["p90_us"].notna(), frame["p90_us"].astype(float).fillna(0.0) - meas, half)
    return np.clip(below, 0, None), np.clip(above, 0, None)


def predicted_vs_measured(store: Store, out_dir: Path, mode: str | None = "model", platform: str | None = None
                          ) -> Path | None:
    """Horizontal grouped bars (ms) of measured (error bar: p10-p90 of the iterations), predicted and baseline time
    per workload run, one panel per platform and family (a GPU step and CPU steps never share an axis, nor a
    geomean); predictions the model cannot tell apart from another plan (see
    :func:`report.checks.indistinguishable`) are hatched. No numbers on the bars: the report's table has them.
    Returns the PNG path, or None without predictions."""
    from report.checks import indistinguishable

    frame = latest(store, mode, platform)
    if frame.empty:
        return None
    _, flagged = indistinguishable(frame, SAME_SHAPE, "label", placement="placement")
    panels = sorted(set(zip(frame["platform"].astype(str), frame["family"].astype(str))))
    several = len({p for p, _ in panels}) > 1
    sizes = [int(((frame["platform"] == p) & (frame["family"] == f)).sum()) for p, f in panels]
    row = max(0.2, min(0.42, 12.0 / len(frame)))  # inches per run: thinner rows keep a long list short
    fig, axes = plt.subplots(len(panels), 1, figsize=(10.0, 0.6 + sum(0.5 + row * n for n in sizes)),
                             squeeze=False, gridspec_kw={"height_ratios": [0.5 + row * n for n in sizes]})
    for ax, (platform_, family) in zip(axes[:, 0], panels):
        part = frame[(frame["platform"] == platform_) & (frame["family"] == family)]
        y = np.arange(len(part))
        h = 0.27
        below, above = measured_range(part)
        ax.barh(y - h, part["measured_us"] / 1e3, h, xerr=(below / 1e3, above / 1e3), capsize=2,
                error_kw={"lw": 0.8}, label="measured (bar: p10-p90 of iterations)", color="#4c72b0")
        ranged = part["range_low_us"].notna().to_numpy()
        low = np.where(ranged, part["predicted_us"] - part["range_low_us"].astype(float).fillna(0.0), 0.0)
        high = np.where(ranged, part["range_high_us"].astype(float).fillna(0.0) - part["predicted_us"], 0.0)
        bars = ax.barh(y, part["predicted_us"] / 1e3, h, label="predicted" + (
                           " (bar: spec-only range, held-out GPUs' errors)" if ranged.any() else ""),
                       color="#dd8452", edgecolor="white", linewidth=0,
                       **({"xerr": (np.clip(low, 0, None) / 1e3, np.clip(high, 0, None) / 1e3), "capsize": 2,
                           "error_kw": {"lw": 0.8}} if ranged.any() else {}))
        for bar, index in zip(bars, part.index):
            if index in flagged:
                bar.set_hatch("//")
        ax.barh(y + h, part["baseline_us"] / 1e3, h, label="baseline (sum of kernels)", color="#bbbbbb")
        geo = gmae(part["predicted_us"], part["measured_us"])
        base = part.dropna(subset=["baseline_us"])
        tail = f"; baseline {100 * gmae(base['baseline_us'], base['measured_us']):.1f}%" if len(base) else ""
        ax.set_title(f"{family}{f' on {platform_}' if several else ''}: geomean |e| {100 * geo:.1f}% over "
                     f"{len(part)} runs{tail} "
                     f"({mode or 'all modes'})", fontsize=9)
        ax.set_yticks(y, [label(r) for _, r in part.iterrows()], fontsize=7)  # the title names the platform
        ax.set_ylim(len(part) - 0.5, -0.5)
        ax.set_xlabel("iteration time (ms)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3)
    handles, names = axes[0, 0].get_legend_handles_labels()
    if flagged:
        handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="#dd8452", hatch="//", edgecolor="white"))
        names.append("predicted, plans indistinguishable to the model")
    fig.legend(handles, names, loc="upper center", ncol=len(names), fontsize=7, frameon=False)
    return _save(fig, out_dir, "predicted_vs_measured", mode, top=0.35)


def stream_breakdown(store: Store, out_dir: Path, mode: str | None = "model", limit: int = 12,
                     platform: str | None = None, max_bars: int = 40) -> Path | None:
    """Horizontal stacked bars per workload and rank (ms): compute busy, communication only, and the rest (CPU-bound
    or idle); one panel with its own time axis per target platform (a GPU step beside CPU steps would make these
    slivers). Uses the latest ``limit`` predictions, fewer when their ranks would make more than ``max_bars`` bars
    (at least one prediction). Returns the PNG path, or None without predictions."""
    frame = latest(store, mode, platform)
    if frame.empty:
        return None
    frame = frame.sort_values("prediction_id").tail(limit)
    per_rank = store.query("SELECT prediction_id, per_rank FROM predictions WHERE prediction_id IN ("
                           + ",".join(str(int(i)) for i in frame["prediction_id"]) + ")")
    ranks = dict(zip(per_rank["prediction_id"], per_rank["per_rank"].map(json.loads)))
    kept, bars = [], 0
    for prediction_id in reversed(frame["prediction_id"].tolist()):  # newest first
        if kept and bars + len(ranks[prediction_id]) > max_bars:
            break
        kept.append(prediction_id)
        bars += len(ranks[prediction_id])
    frame = frame[frame["prediction_id"].isin(kept)]
    platforms = list(dict.fromkeys(frame["platform"]))  # one panel (own time axis) per platform
    bars_of = {p: [] for p in platforms}  # platform -> (label, compute, comm only, rest) per rank, ms
    for _, row in frame.iterrows():
        for rank in ranks[row["prediction_id"]]:
            bars_of[row["platform"]].append((
                f"{label(row)} r{rank['rank']}", rank["compute_busy_us"] / 1e3,
                rank["comm_unoverlapped_us"] / 1e3, max(0.0, rank["predicted_us"] - rank["device_active_us"]) / 1e3))
    heights = [0.6 + 0.24 * len(bars_of[p]) for p in platforms]
    fig, axes = plt.subplots(len(platforms), 1, figsize=(10.0, 0.7 + sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, platform_ in zip(axes[:, 0], platforms):
        labels, compute, comm_only, rest = (list(v) for v in zip(*bars_of[platform_]))
        y = np.arange(len(labels))
        ax.barh(y, compute, 0.7, label="compute busy", color="#4c72b0")
        ax.barh(y, comm_only, 0.7, left=compute, label="communication only", color="#c44e52")
        ax.barh(y, rest, 0.7, left=np.add(compute, comm_only), label="CPU / idle (no stream busy)",
                color="#cccccc")
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_ylim(len(labels) - 0.5, -0.5)
        ax.set_xlabel("predicted time (ms)", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_title(f"{platform_}: per-rank time breakdown of the predicted iteration "
                     f"({mode or 'all modes'})", fontsize=9)
    handles, names = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", ncol=3, fontsize=7, frameon=False)
    return _save(fig, out_dir, "stream_breakdown", mode, top=0.3)


def _save(fig: plt.Figure, out_dir: Path, stem: str, mode: str | None, top: float = 0.0) -> Path:
    """Lay out (leaving ``top`` inches for the figure legend) and write ``<stem>[_<mode>].png`` at 100 dpi, its
    panels' titles in the PNG's ``Description`` chunk (JSON list)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout(rect=(0, 0, 1, 1 - top / fig.get_figheight()))
    path = out_dir / f"{stem}{'_' + mode if mode else ''}.png"
    titles = [ax.get_title() for ax in fig.axes]  # the panels, read back by report.figures.series_of
    fig.savefig(path, dpi=100, metadata={"Description": json.dumps(titles)})
    plt.close(fig)
    return path


def write_report(store: Store, out_dir: Path, platform: str | None = None) -> list[Path]:
    """Both plots for model-mode and replay-mode predictions (of one target platform when given); the files
    written."""
    written = []
    for mode in ("model", "replay"):
        for plot in (predicted_vs_measured, stream_breakdown):
            path = plot(store, Path(out_dir), mode, platform=platform)
            if path is not None:
                written.append(path)
    return written
