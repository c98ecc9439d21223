"""The report's own figures (PNG, matplotlib Agg), each drawn from a frame a named SQL query returned: the fitted
collective curves over their measured points (Fig. 9) and the plans of the sharding studies (the kernel-model error
view is :mod:`report.kernel_figures`). Functions return the file written, or None when the frame has nothing to draw.
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
from fitters.data import COLLECTIVE_ALIASES  # noqa: E402
from report.checks import curve_jumps  # noqa: E402

DPI = 100


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


def collective_params(row: pd.Series) -> tuple[CollectiveParams, float]:
    """The fitted parameters and bus factor of a collective model row (its ``params`` JSON)."""
    params = _json(row["params"])
    p = CollectiveParams(**{k: float(params[k]) for k in CollectiveParams.__dataclass_fields__})
    return p, float(params["bus_factor"])


def model_collective(name: str) -> str:
    """The collective whose model times ``name`` (all_to_allv points are test points of the all_to_all model)."""
    return COLLECTIVE_ALIASES.get(name, name)


def panel_keys(points: pd.DataFrame, models: pd.DataFrame) -> list[tuple[str, str, int]]:
    """(platform, model collective, world size) of every panel: measured points and fitted models together."""
    keys = {(str(p), model_collective(str(c)), int(w))
            for p, c, w in zip(points["platform"], points["collective"], points["world_size"])}
    keys |= {(str(p), str(c), int(w)) for p, c, w in zip(models["platform"], models["op"], models["world_size"])}
    return sorted(keys, key=lambda k: (k[0], k[2], k[1]))


def _draw_curve(ax: plt.Axes, p: CollectiveParams, mul: float, lo: float, hi: float, label: str) -> None:
    """The fitted curve, one line per region (m <= m1, between, m >= m2): a jump of the model shows as a gap
    instead of a vertical line the plot would invent between two samples."""
    regions = ((lo, p.m1), (p.m1, p.m2 * (1 - 1e-9)), (p.m2, hi))
    first = True
    for a, b in regions:
        a, b = max(a, lo), min(b, hi)
        if b <= a:
            continue
        sizes = np.geomspace(a, b, 120)
        ax.plot(sizes, curve(p, mul, sizes), c="k", lw=1.2, label=label if first else None)
        first = False
    for boundary in (p.m1, p.m2):
        if lo <= boundary <= hi:
            ax.axvline(boundary, color="green", ls="--", lw=0.8)


def collective_curves(points: pd.DataFrame, models: pd.DataFrame, path: Path) -> Path | None:
    """Per (platform, collective, world size): measured p50 latency over message size (all_to_allv's random-split
    points in the all_to_all panel, the model that times them), the fitted curve with its turning points m1, m2
    (dashed) and its held-out GMAE in the title (paper Fig. 9)."""
    keys = panel_keys(points, models)
    if not keys:
        return None
    several = len({k[0] for k in keys}) > 1
    cols = min(3 if len(keys) <= 9 else 4, len(keys))
    lines = math.ceil(len(keys) / cols)
    width, height = (3.8 * cols if cols < 4 else 12.0), (3.0 if lines <= 3 else 2.6) * lines
    fig, axes = plt.subplots(lines, cols, figsize=(width, height), squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.axis("off")
    series: list[str] = []
    for ax, (platform, collective, world) in zip(axes.flat, keys):
        mine = points[(points["platform"] == platform) & (points["world_size"] == world)
                      & (points["collective"].map(model_collective) == collective)]
        for (name, kind), group in mine.groupby(["collective", "split_kind"]):
            label = f"{name} ({kind} splits" + (", test points)" if name != collective else ")")
            ax.scatter(group["max_rank_bytes"], group["lat_us"], s=9, label=label,
                       marker="o" if kind == "equal" else "x")
            series.append(f"{name} ws{world} measured {kind}")
        fitted = models[(models["platform"] == platform) & (models["op"] == collective)
                        & (models["world_size"] == world)]
        title = f"{collective}, world size {world}" + (f" ({platform})" if several else "")
        if len(fitted):
            row = fitted.iloc[0]
            p, mul = collective_params(row)
            lo = float(mine["max_rank_bytes"].min()) if len(mine) else p.m1 / 64
            hi = float(mine["max_rank_bytes"].max()) if len(mine) else p.m2 * 64
            _draw_curve(ax, p, mul, max(lo, 1.0), max(hi, lo * 2, 2.0), f"fitted v{int(row['version'])}")
            series.append(f"{collective} ws{world} fitted")
            for boundary, below, at in curve_jumps(curve, p, mul, (p.m1, p.m2)):
                ax.plot([boundary, boundary], [below, at], c="red", ls=":", lw=1.2)
                ax.annotate(f"model jumps x{max(below, at) / min(below, at):.1f}", (boundary, max(below, at)),
                            fontsize=7, color="red", ha="right", va="bottom")
                series.append(f"{collective} ws{world} jump at {boundary:.0f}")
            gm = row.get("test_gmae")
            title += "\n" + (f"held-out GMAE {100 * gm:.1f}% (n={int(row['n_test'])})" if pd.notna(gm)
                             else "no held-out error stored")
        else:
            title += "\nno fitted curve"
        ax.set(xscale="log", yscale="log")
        ax.set_xlabel("message size, max over ranks (bytes)", fontsize=8)
        ax.set_ylabel("latency (µs)", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="upper left")
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
