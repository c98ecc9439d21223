"""The report's own figures (PNG, matplotlib Agg), each drawn from a frame a named SQL query returned:
kernel-model test error histograms per op, the fitted collective curves over their measured points (Fig. 9), and
the plans of the sharding studies. Functions return the file written, or None when the frame has nothing to draw.
Each PNG lists the series it draws in its ``Description`` text chunk (JSON), so what a figure shows can be checked."""
from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fitters.collective import CollectiveParams, curve  # noqa: E402

DPI = 100
PANEL_COLUMNS = 4


def _json(value: object) -> dict:
    if isinstance(value, dict):
        return value
    return json.loads(value) if isinstance(value, str) and value else {}


def _save(fig: plt.Figure, path: Path, series: list[str]) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI, metadata={"Description": json.dumps(series)})
    plt.close(fig)
    return path


def series_of(path: Path) -> list[str]:
    """The series a figure of this module drew (from its PNG text chunk)."""
    from PIL import Image

    with Image.open(path) as image:
        return json.loads(image.text.get("Description", "[]"))


def _model_title(row: pd.Series) -> str:
    parts = [str(row["op"]), str(row["pass"]) if pd.notna(row["pass"]) else f"ws{int(row['world_size'])}"]
    for extra in ("implementation", "cache_state"):
        if pd.notna(row.get(extra)) and row.get(extra):
            parts.append(str(row[extra]))
    gmae = row.get("test_gmae")
    tail = f"\n{row['family']} v{int(row['version'])}" + (f", GMAE {100 * gmae:.1f}%" if pd.notna(gmae) else "")
    return " ".join(parts) + tail


def error_histograms(models: pd.DataFrame, path: Path) -> Path | None:
    """One panel per model: counts of held-out rows per bin of e = (predicted - measured) / measured."""
    rows = [r for _, r in models.iterrows() if _json(r["test_error_hist"]).get("counts")]
    if not rows:
        return None
    cols = min(PANEL_COLUMNS, len(rows))
    lines = math.ceil(len(rows) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(3.4 * cols, 2.7 * lines), squeeze=False)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, row in zip(axes.flat, rows):
        hist = _json(row["test_error_hist"])
        counts, labels = hist["counts"], hist.get("labels") or [str(i) for i in range(len(hist["counts"]))]
        ax.bar(range(len(counts)), counts, color="#4c72b0")
        ax.set_xticks(range(len(counts)), labels, rotation=70, fontsize=6)
        ax.set_title(_model_title(row), fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
    fig.suptitle("held-out test error histograms, e = (predicted - measured) / measured", fontsize=10)
    return _save(fig, path, [str(r["name"]) for r in rows])


def collective_curves(points: pd.DataFrame, models: pd.DataFrame, path: Path) -> Path | None:
    """Per (collective, world size): measured p50 latency over message size, and the fitted curve with its turning
    points m1, m2 (dashed) when a model exists (paper Fig. 9)."""
    if points.empty and models.empty:
        return None
    keys = sorted(set(zip(points["collective"], points["world_size"].astype(int))) |
                  set(zip(models["op"], models["world_size"].astype(int))))
    cols = min(3, len(keys))
    lines = math.ceil(len(keys) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(4.6 * cols, 3.5 * lines), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.axis("off")
    series: list[str] = []
    for ax, (collective, world) in zip(axes.flat, keys):
        mine = points[(points["collective"] == collective) & (points["world_size"] == world)]
        for kind, group in mine.groupby("split_kind"):
            ax.scatter(group["max_rank_bytes"], group["lat_p50_us"], s=9, label=f"measured ({kind})",
                       marker="o" if kind == "equal" else "x")
            series.append(f"{collective} ws{world} measured {kind}")
        fitted = models[(models["op"] == collective) & (models["world_size"] == world)]
        if len(fitted):
            params = _json(fitted.iloc[0]["params"])
            p = CollectiveParams(**{k: float(params[k]) for k in CollectiveParams.__dataclass_fields__})
            lo = float(mine["max_rank_bytes"].min()) if len(mine) else p.m1 / 64
            hi = float(mine["max_rank_bytes"].max()) if len(mine) else p.m2 * 64
            sizes = np.geomspace(max(lo, 1.0), max(hi, lo * 2, 2.0), 300)
            ax.plot(sizes, curve(p, float(params["bus_factor"]), sizes), c="k", lw=1.2,
                    label=f"fitted v{int(fitted.iloc[0]['version'])}")
            series.append(f"{collective} ws{world} fitted")
            for boundary in (p.m1, p.m2):
                ax.axvline(boundary, color="green", ls="--", lw=0.8)
        ax.set(xscale="log", yscale="log", xlabel="message size, max over ranks (bytes)", ylabel="latency (µs)",
               title=f"{collective}, world size {world}")
        ax.legend(fontsize=7)
    return _save(fig, path, series)


def shard_plans(plans: pd.DataFrame, path: Path, limit: int = 12) -> Path | None:
    """Predicted vs measured time of every plan of the latest ``limit`` validated studies, each normalised by its
    study's measured fastest plan (1.0 = fastest); the chosen plan is marked."""
    done = plans.dropna(subset=["measured_ms"])
    if done.empty:
        return None
    studies = sorted(done["study_id"].unique())[-limit:]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(studies) + 2), 4.0))
    for x, study in enumerate(studies):
        part = done[done["study_id"] == study]
        best = float(part["measured_ms"].min())
        pred_best = float(part["predicted_ms"].min())
        ax.scatter([x - 0.12] * len(part), part["measured_ms"] / best, s=14, c="#4c72b0",
                   label="measured / fastest" if x == 0 else None)
        ax.scatter([x + 0.12] * len(part), part["predicted_ms"] / pred_best, s=14, c="#dd8452",
                   label="predicted / predicted fastest" if x == 0 else None)
        chosen = part[part["is_chosen"].astype(bool)]
        ax.scatter([x - 0.12] * len(chosen), chosen["measured_ms"] / best, s=70, facecolors="none",
                   edgecolors="k", label="chosen plan (measured)" if x == 0 else None)
    ax.axhline(1.10, color="red", ls="--", lw=0.8, label="10% success margin")
    ax.set_xticks(range(len(studies)), [f"study {s}" for s in studies], rotation=45, ha="right", fontsize=7)
    ax.set_xlim(-0.6, len(studies) - 0.4)
    ax.set_ylabel("time relative to the fastest plan")
    ax.set_title("sharding plans: measured and predicted, relative to the fastest", fontsize=10)
    ax.legend(fontsize=7)
    return _save(fig, path, [f"study {s}" for s in studies])
