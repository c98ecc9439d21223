"""Figures logged with each fit: predicted vs measured (test and training rows) with the test error histogram, and
for collectives the fitted curve over the measured points with the region boundaries (like the paper's Fig. 9)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

DPI = 80


def _figure(width: float, height: float, columns: int = 1, bottom: float = 0.14) -> tuple[Figure, list]:
    """A figure outside pyplot (no global state, nothing to close) with fixed margins (tight_layout is slow)."""
    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, columns, i + 1) for i in range(columns)]
    fig.subplots_adjust(left=0.1, right=0.98, bottom=bottom, top=0.92, wspace=0.28)
    return fig, axes


def scatter(path: Path, title: str, measured_test: np.ndarray, predicted_test: np.ndarray,
            measured_train: np.ndarray, predicted_train: np.ndarray, histogram: dict) -> Path:
    """Log-log predicted vs measured µs (test in colour, training in grey) and the test error histogram."""
    fig, (left, right) = _figure(9, 4.4, 2, bottom=0.3)
    left.scatter(measured_train, predicted_train, s=6, c="0.75", label=f"train ({len(measured_train)})")
    left.scatter(measured_test, predicted_test, s=10, c="tab:blue", label=f"test ({len(measured_test)})")
    both = np.concatenate([measured_test, predicted_test, measured_train, predicted_train])
    both = both[np.isfinite(both) & (both > 0)]
    if both.size:
        lo, hi = both.min() / 1.2, both.max() * 1.2
        left.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    left.set(xscale="log", yscale="log", xlabel="measured (µs)", ylabel="predicted (µs)", title=title)
    left.legend(fontsize=8)
    counts = histogram["counts"]
    labels = histogram["labels"]
    right.bar(range(len(counts)), counts, color="tab:blue")
    right.set_xticks(range(len(counts)), labels, rotation=60, fontsize=7)
    right.set(xlabel="(predicted - measured) / measured", ylabel="test rows",
              title="test error histogram")
    fig.savefig(path, dpi=DPI)
    return path


def collective_curve(path: Path, title: str, sizes_train: np.ndarray, times_train: np.ndarray,
                     sizes_test: np.ndarray, times_test: np.ndarray, curve_sizes: np.ndarray,
                     curve_times: np.ndarray, boundaries: tuple[float, float]) -> Path:
    """Measured latency over message size (train dots, test crosses), the fitted curve and m1, m2 (green dashes)."""
    fig, (ax,) = _figure(6.5, 4.2)
    ax.scatter(sizes_train, times_train, s=10, c="tab:blue", label=f"train ({len(sizes_train)})")
    ax.scatter(sizes_test, times_test, s=22, marker="x", c="tab:orange", label=f"test ({len(sizes_test)})")
    ax.plot(curve_sizes, curve_times, c="k", lw=1.2, label="fitted model")
    for boundary in boundaries:
        ax.axvline(boundary, color="green", ls="--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="message size, max over ranks (bytes)", ylabel="latency (µs)",
           title=title)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=DPI)
    return path
