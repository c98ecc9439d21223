"""Piecewise-linear lookup in a short measured curve: what the caches keep after a wait
(:mod:`simulator.cache_decay`), what a call pays for its code path away (:mod:`simulator.code_away`) and what
the LLC holds at a reuse footprint (:mod:`simulator.llc_found`). Pure Python: it runs once per priced op."""
from __future__ import annotations

from typing import Sequence


def linear(x: float, xs: Sequence[float], ys: Sequence[float]) -> float:
    """``ys`` interpolated linearly at ``x`` between the ascending ``xs``: the first value at or before the first
    point, the last one beyond the last."""
    if x <= xs[0]:
        return ys[0]
    for x0, y0, x1, y1 in zip(xs, ys, xs[1:], ys[1:]):
        if x <= x1:
            return y0 + (x - x0) / (x1 - x0) * (y1 - y0)
    return ys[-1]
