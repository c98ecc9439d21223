"""Report plots from stored predictions: predicted vs measured per workload (like the paper's Fig. 10/11) and the
per-rank, per-stream time breakdown. Functions take a store and an output directory and return the files written;
``platform`` keeps the predictions made for that target platform only (None: every platform)."""
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
SELECT * FROM v_prediction_errors
WHERE (? IS NULL OR mode = ?) AND (? IS NULL OR platform = ?)
ORDER BY family, world_size, workload, batch_size, sharder, prediction_id
"""


def _label(row: pd.Series) -> str:
    parts = [str(row["workload"])]
    if pd.notna(row.get("batch_size")):
        parts.append(f"b{int(row['batch_size'])}")
    parts.append(f"ws{int(row['world_size'])}")
    if pd.notna(row.get("sharder")) and row["sharder"]:
        parts.append(str(row["sharder"]))
    return " ".join(parts)


def _latest(store: Store, mode: str | None, platform: str | None) -> pd.DataFrame:
    return store.query(_LATEST, [mode, mode, platform, platform])


def predicted_vs_measured(store: Store, out_dir: Path, mode: str | None = "model", platform: str | None = None
                          ) -> Path | None:
    """Grouped bars (ms) of measured, predicted and baseline time per workload run, one panel per family;
    the error of each prediction is written above its bar. Returns the PNG path, or None without predictions."""
    frame = _latest(store, mode, platform)
    if frame.empty:
        return None
    families = list(dict.fromkeys(frame["family"]))
    fig, axes = plt.subplots(len(families), 1, figsize=(max(6.0, 0.55 * frame.groupby("family").size().max() + 2),
                                                        3.6 * len(families)), squeeze=False)
    for ax, family in zip(axes[:, 0], families):
        part = frame[frame["family"] == family].reset_index(drop=True)
        x = np.arange(len(part))
        width = 0.27
        ax.bar(x - width, part["measured_us"] / 1e3, width, label="measured", color="#4c72b0")
        bars = ax.bar(x, part["predicted_us"] / 1e3, width, label="predicted", color="#dd8452")
        ax.bar(x + width, part["baseline_us"] / 1e3, width, label="baseline (sum of kernels)", color="#bbbbbb")
        for bar, err in zip(bars, part["rel_error"]):
            ax.annotate(f"{100 * err:+.1f}%", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
        geo = gmae(part["predicted_us"], part["measured_us"])
        ax.set_title(f"{family}: geomean |e| {100 * geo:.2f}% over {len(part)} runs ({mode or 'all modes'})")
        ax.set_xticks(x, [_label(r) for _, r in part.iterrows()], rotation=45, ha="right", fontsize=7)
        ax.set_ylabel("iteration time (ms)")
        ax.legend(fontsize=7)
    return _save(fig, out_dir, "predicted_vs_measured", mode)


def stream_breakdown(store: Store, out_dir: Path, mode: str | None = "model", limit: int = 12,
                     platform: str | None = None) -> Path | None:
    """Stacked bars per workload and rank (ms): compute busy, communication only, and the rest (CPU-bound or idle).
    Uses the latest ``limit`` predictions. Returns the PNG path, or None without predictions."""
    frame = _latest(store, mode, platform)
    if frame.empty:
        return None
    frame = frame.sort_values("prediction_id").tail(limit)
    per_rank = store.query("SELECT prediction_id, per_rank FROM predictions WHERE prediction_id IN ("
                           + ",".join(str(int(i)) for i in frame["prediction_id"]) + ")")
    ranks = dict(zip(per_rank["prediction_id"], per_rank["per_rank"].map(json.loads)))
    labels, compute, comm_only, rest = [], [], [], []
    for _, row in frame.iterrows():
        for rank in ranks[row["prediction_id"]]:
            labels.append(f"{_label(row)} r{rank['rank']}")
            compute.append(rank["compute_busy_us"] / 1e3)
            comm_only.append(rank["comm_unoverlapped_us"] / 1e3)
            rest.append(max(0.0, rank["predicted_us"] - rank["device_active_us"]) / 1e3)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.4 * len(labels) + 2), 4.2))
    x = np.arange(len(labels))
    ax.bar(x, compute, label="compute busy", color="#4c72b0")
    ax.bar(x, comm_only, bottom=compute, label="communication only", color="#c44e52")
    ax.bar(x, rest, bottom=np.add(compute, comm_only), label="CPU / idle (no stream busy)", color="#cccccc")
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(f"per-rank time breakdown of the predicted iteration ({mode or 'all modes'})")
    ax.legend(fontsize=7)
    return _save(fig, out_dir, "stream_breakdown", mode)


def _save(fig: plt.Figure, out_dir: Path, stem: str, mode: str | None) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    path = out_dir / f"{stem}{'_' + mode if mode else ''}.png"
    fig.savefig(path, dpi=110)
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
