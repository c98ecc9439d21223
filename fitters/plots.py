"""Figures logged with each fit: predicted vs measured (test and training rows) with the test error histogram, and
for collectives the fitted curve over the measured points with the region boundaries (like the paper's Fig. 9).

Drawing is most of a small fit's cost, so the log axes skip what costs time and says little: no minor ticks, and
tick labels as plain text (``10³``, not mathtext); a span of less than two decades gets ticks at 1, 2 and 5 times the
powers of ten, labelled as numbers. A :class:`FigureJob` describes one figure as data, so it can be drawn in another
process (:mod:`fitters.figure_worker`) while the fit goes on.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

DPI = 80
_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _figure(width: float, height: float, columns: int = 1, bottom: float = 0.14) -> tuple[Any, list]:
    """A figure outside pyplot (no global state, nothing to close) with fixed margins (tight_layout is slow).
    matplotlib is imported here: a fit whose figures are drawn by the worker never imports it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(1, columns, i + 1) for i in range(columns)]
    fig.subplots_adjust(left=0.1, right=0.98, bottom=bottom, top=0.92, wspace=0.28)
    return fig, axes


def _power_label(value: float, _pos: Any = None) -> str:
    """``10ⁿ`` for a power of ten (plain text: mathtext labels cost more than the rest of the axis)."""
    if not value > 0:
        return ""
    exponent = np.log10(value)
    return "10" + str(int(round(exponent))).translate(_SUPERSCRIPT) if abs(exponent - round(exponent)) < 1e-6 else ""


def _number_label(value: float, _pos: Any = None) -> str:
    return f"{value:g}" if value > 0 else ""


def _decades(values: list[np.ndarray]) -> float:
    """How many decades the positive finite values span (inf when there are none)."""
    finite = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    return float(np.log10(finite.max() / finite.min())) if finite.size else float("inf")


def _log_axes(ax: Any, x_values: list[np.ndarray], y_values: list[np.ndarray]) -> None:
    """Both axes logarithmic with major ticks only: powers of ten (``10ⁿ``) over two decades or more, else 1, 2 and
    5 times them (below one decade 1 to 9 times them) as plain numbers, so a narrow range still has labelled ticks."""
    from matplotlib import ticker

    ax.set(xscale="log", yscale="log")
    for axis, values in ((ax.xaxis, x_values), (ax.yaxis, y_values)):
        axis.set_minor_locator(ticker.NullLocator())
        decades = _decades(values)
        if decades < 2:
            subs = (1.0, 2.0, 5.0) if decades >= 1 else tuple(float(i) for i in range(1, 10))
            axis.set_major_locator(ticker.LogLocator(subs=subs))
            axis.set_major_formatter(ticker.FuncFormatter(_number_label))
        else:
            axis.set_major_formatter(ticker.FuncFormatter(_power_label))


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
    _log_axes(left, [both], [both])
    left.set(xlabel="measured (µs)", ylabel="predicted (µs)", title=title)
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
    _log_axes(ax, [sizes_train, sizes_test, curve_sizes], [times_train, times_test, curve_times])
    ax.set(xlabel="message size, max over ranks (bytes)", ylabel="latency (µs)", title=title)
    ax.legend(fontsize=8)
    fig.savefig(path, dpi=DPI)
    return path


DRAWERS = {"scatter": scatter, "collective_curve": collective_curve}


@dataclass
class FigureJob:
    """One figure as data: ``DRAWERS[kind](path, **arrays, **options)``; ``options`` are JSON-ready (title,
    histogram, boundaries), ``arrays`` 1-D float arrays."""

    kind: str
    path: Path
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)

    def draw(self) -> Path:
        return DRAWERS[self.kind](Path(self.path), **self.arrays, **self.options)
