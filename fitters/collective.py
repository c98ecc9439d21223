"""Collective family (paper Eq. 2-4, method.md section 4), made continuous.

For a message of m bytes (``max_rank_bytes``), bus factor ``mul``, x = log2 m and times in µs:

* m <= m1:      t = t_s
* m1 < m < m2:  t = m·mul / (1e3 · 10^sigmoid(x)),   sigmoid(x) = L / (1 + e^(-k (x - x0))) + b  (log10 bus GB/s)
* m >= m2:      t = t_s + m·mul / (1e3 · BW_max)

The paper's middle branch jumps at the region boundaries. Here L and b are not free: they are solved from the two
continuity conditions (the middle branch meets t_s at m1 and the linear branch at m2), so the curve is continuous by
construction and the remaining parameters (t_s, BW_max, k, x0, m1, m2) are identifiable. All eight numbers are stored.
Where the logistic is flat across [m1, m2] that solve has nothing to work with, so the fit also penalises a middle
branch that misses an outer one (:func:`continuity_gap`), as it penalises one whose latency falls with size.

Fitting: turning points are chosen among (at most 64, log-spaced) distinct training sizes: pairs on a coarse grid get
a quick robust least-squares fit in ln(time) (soft-L1: timing spikes of a loaded machine count linearly); the best
few, and the reference heuristics' pair (on the median latency per size), are improved by a local search over
neighbouring candidates; the best pairs are refined on all training rows and the lowest robust cost wins.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fitters.model import Model
from pmdb.errors import PmdbError

SCORE_SIZES = 64      # candidate turning points and sizes used to score a pair (log-spaced subset)
COARSE = 10           # coarse grid of candidates per boundary
CLIMB_TOP = 3         # best coarse pairs improved by local search
REFINE_TOP = 3        # pairs refined on all sizes
MIN_SIZES = 6         # distinct training sizes needed
K_BOUNDS = (1e-2, 20.0)
ROBUST_SCALE = 0.05   # ln-time residual beyond which a point counts linearly (soft-L1)
MONOTONE_WEIGHT = 10.0  # weight of the penalty on a middle branch whose latency falls with growing size
CONTINUITY_WEIGHT = 10.0  # weight of the penalty on a middle branch that misses an outer one at a turning point


def bus_factor(collective: str, world_size: int) -> float:
    """Bus-bandwidth factor (method.md section 4)."""
    n = int(world_size)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_to_all", "all_to_allv", "all_gather", "reduce_scatter"):
        return (n - 1) / n
    return 1.0


def _logistic(x: np.ndarray | float, k: float, x0: float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(k * (np.asarray(x, dtype=float) - x0), -60, 60)))


@dataclass(frozen=True)
class CollectiveParams:
    """Turning points m1 < m2 (bytes), t_s (µs), BW_max (bus GB/s), the sigmoid's L, k, x0, b (x = log2 bytes)."""

    m1: float
    m2: float
    t_s: float
    bw_max: float
    L: float
    k: float
    x0: float
    b: float

    @classmethod
    def continuous(cls, m1: float, m2: float, t_s: float, bw_max: float, k: float, x0: float,
                   mul: float) -> "CollectiveParams":
        """Solve L and b so that the middle branch meets both outer branches."""
        y1 = np.log10(m1 * mul / (1e3 * t_s))
        y2 = np.log10(m2 * mul / (1e3 * (t_s + m2 * mul / (1e3 * bw_max))))
        s1, s2 = float(_logistic(np.log2(m1), k, x0)), float(_logistic(np.log2(m2), k, x0))
        big_l = (y2 - y1) / max(s2 - s1, 1e-12)
        return cls(float(m1), float(m2), float(t_s), float(bw_max), float(big_l), float(k), float(x0),
                   float(y1 - big_l * s1))

    def sigmoid(self, x: np.ndarray) -> np.ndarray:
        return self.L * _logistic(x, self.k, self.x0) + self.b


def continuity_gap(p: CollectiveParams, mul: float) -> float:
    """The larger |ln| ratio, at m1 and at m2, of the middle branch to the outer branch it should meet (0 when the
    curve is continuous). :meth:`CollectiveParams.continuous` solves L and b for 0, but a logistic that is flat
    across [m1, m2] (its midpoint far outside, its slope steep) leaves that solve without a usable difference: the
    curve then jumps at a turning point, by x6 in a fit of 2026-11-30 (all_to_all ws2 on the AMD host: 1689 µs at
    192 KiB, 365 at 256 KiB)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        middle = _middle(p, mul, np.array([p.m1, p.m2], dtype=float))
        gap = np.abs(np.log(middle) - np.log([p.t_s, float(_linear(p, mul, p.m2))]))
    return float(np.nan_to_num(gap, nan=50.0, posinf=50.0).max())


def _middle(p: CollectiveParams, mul: float, m: np.ndarray) -> np.ndarray:
    """The middle branch's µs at ``m`` bytes, whatever region m lies in."""
    with np.errstate(over="ignore", divide="ignore"):
        return m * mul / (1e3 * 10.0 ** p.sigmoid(np.log2(np.maximum(m, 1.0))))


def _linear(p: CollectiveParams, mul: float, m: np.ndarray | float) -> np.ndarray:
    """The bandwidth branch's µs at ``m`` bytes."""
    return p.t_s + np.asarray(m, dtype=float) * mul / (1e3 * p.bw_max)


def curve(p: CollectiveParams, mul: float, m: np.ndarray) -> np.ndarray:
    """Latency in µs of messages of ``m`` bytes."""
    m = np.asarray(m, dtype=float)
    return np.where(m <= p.m1, p.t_s, np.where(m >= p.m2, _linear(p, mul, m), _middle(p, mul, m)))


class CollectiveModel(Model):
    """``predict`` takes a frame with ``max_rank_bytes`` (bytes) and returns µs."""

    family = "sigmoid"

    def __init__(self, collective: str, world_size: int, params: CollectiveParams, info: dict[str, Any] | None = None):
        self.collective, self.world_size, self.params = collective, int(world_size), params
        self.mul = bus_factor(collective, world_size)
        self.info = info or {}

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        if "max_rank_bytes" not in frame.columns:
            raise PmdbError("the collective model needs a max_rank_bytes column (bytes: max over ranks of the bytes "
                            "sent or received by one rank)")
        sizes = pd.to_numeric(frame["max_rank_bytes"], errors="coerce").to_numpy(dtype=float)
        if np.isnan(sizes).any() or (sizes < 0).any():
            raise PmdbError("max_rank_bytes must be non-negative numbers")
        return curve(self.params, self.mul, sizes)

    def config(self) -> dict[str, Any]:
        return {"collective": self.collective, "world_size": self.world_size, "bus_factor": self.mul,
                **asdict(self.params), "fit": self.info,
                "features": {"inputs": ["max_rank_bytes"], "x": "log2(max_rank_bytes)", "unit": "µs"}}

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "CollectiveModel":
        params = CollectiveParams(**{k: config[k] for k in CollectiveParams.__dataclass_fields__})
        return cls(config["collective"], config["world_size"], params, config.get("fit"))


# ---- fitting ---------------------------------------------------------------------------------------------------
def reference_turning_points(sizes: np.ndarray, times: np.ndarray, mul: float) -> tuple[int, int]:
    """Indices (into the sorted distinct sizes) of m1 and m2 by the reference code's heuristics."""
    busbw = sizes * mul / (times * 1e3)
    below = np.flatnonzero(busbw < 0.95 * busbw.max())
    i2 = min(int(below.max()) + 2, len(sizes) - 1) if below.size else len(sizes) - 1
    change = np.abs(np.gradient(times)) / times
    i1 = next((max(i - 1, 0) for i in range(min(4, len(sizes) - 1), len(sizes)) if change[i] > 0.10), 0)
    i1 = min(i1, i2 - 1)
    return i1, max(i2, i1 + 1)


def _fit_pair(m1: float, m2: float, mul: float, sizes: np.ndarray, times: np.ndarray,
              max_nfev: int) -> tuple[CollectiveParams, float]:
    """Robust least squares in ln(time) over (ln t_s, ln BW_max, k, x0) for fixed turning points.

    Returns the parameters and the mean robust cost (soft-L1 with scale ROBUST_SCALE: a latency spike of one
    repetition batch counts linearly, not squared)."""
    target = np.log(times)
    low, high = sizes <= m1, sizes >= m2
    t_s = float(np.median(times[low])) if low.any() else float(times.min())
    extra = high & (times > t_s)
    busbw = sizes * mul / (times * 1e3)
    bw_max = float(np.median(sizes[extra] * mul / (1e3 * (times[extra] - t_s)))) if extra.any() else busbw.max()
    x1, x2 = np.log2(m1), np.log2(m2)

    def unpack(theta: np.ndarray) -> CollectiveParams:
        t_s, bw = np.exp(np.clip(theta[:2], -50.0, 50.0))  # the optimiser may probe absurd values
        return CollectiveParams.continuous(m1, m2, float(t_s), float(bw), float(theta[2]), float(theta[3]), mul)

    grid = np.linspace(x1, x2, 33)

    def residuals(theta: np.ndarray) -> np.ndarray:
        p = unpack(theta)
        with np.errstate(over="ignore", invalid="ignore"):
            r = np.log(curve(p, mul, sizes)) - target
            # latency does not fall as messages grow: penalise a negative slope of ln t over log2 m in the middle
            s = _logistic(grid, p.k, p.x0)
            slope = np.log(2.0) - np.log(10.0) * p.L * p.k * s * (1.0 - s)
        penalty = MONOTONE_WEIGHT * np.maximum(-slope.min(), 0.0)
        # ... and does not jump at a turning point: the middle branch meets both outer ones
        jump = CONTINUITY_WEIGHT * continuity_gap(p, mul)
        return np.nan_to_num(np.append(r, [penalty, jump]), nan=50.0, posinf=50.0, neginf=-50.0)

    start = np.array([np.log(t_s), np.log(max(bw_max, 1e-9)), 4.0 / max(x2 - x1, 1.0), (x1 + x2) / 2])
    lower = [-np.inf, -np.inf, K_BOUNDS[0], x1 - 20]
    upper = [np.inf, np.inf, K_BOUNDS[1], x2 + 20]
    result = least_squares(residuals, np.clip(start, lower, upper), bounds=(lower, upper), method="trf",
                           loss="soft_l1", f_scale=ROBUST_SCALE, max_nfev=max_nfev)
    return unpack(result.x), float(result.cost / len(result.fun))


def _subset(count: int, limit: int, sizes: np.ndarray) -> np.ndarray:
    """Indices of at most ``limit`` sizes spread evenly in log2(size)."""
    if count <= limit:
        return np.arange(count)
    wanted = np.linspace(np.log2(sizes[0]), np.log2(sizes[-1]), limit)
    return np.unique(np.searchsorted(np.log2(sizes), wanted).clip(0, count - 1))


def _search_pairs(sizes: np.ndarray, rows_m: np.ndarray, rows_t: np.ndarray, mul: float,
                  ref: tuple[int, int]) -> list[tuple[int, int]]:
    """Turning-point pairs (indices into the distinct ``sizes``) worth refining: the best of a coarse grid and of the
    reference pair, each improved by moving either boundary to a neighbouring candidate while that lowers the error.
    Pairs are scored on the rows (``rows_m``, ``rows_t``) whose size is one of the candidates."""
    positions = _subset(len(sizes), SCORE_SIZES, sizes)  # candidate indices, at most SCORE_SIZES of them
    scored = np.isin(rows_m, sizes[positions])
    cache: dict[tuple[int, int], float] = {}

    def score(a: int, b: int) -> float:
        if (a, b) not in cache:
            cache[(a, b)] = _fit_pair(sizes[positions[a]], sizes[positions[b]], mul, rows_m[scored],
                                      rows_t[scored], 40)[1]
        return cache[(a, b)]

    coarse = np.unique(np.linspace(0, len(positions) - 1, min(COARSE, len(positions))).round().astype(int))
    starts = sorted(((a, b) for a in coarse for b in coarse if b > a), key=lambda ab: score(*ab))[:CLIMB_TOP]
    starts.append((int(np.searchsorted(positions, sizes_index(ref[0], positions))),
                   int(np.searchsorted(positions, sizes_index(ref[1], positions)))))
    found = set()
    for a, b in starts:
        while True:
            moves = [(a + da, b + db) for da in (-2, -1, 0, 1, 2) for db in (-2, -1, 0, 1, 2)
                     if 0 <= a + da < b + db < len(positions)]
            best = min(moves, key=lambda ab: score(*ab))
            if score(*best) >= score(a, b):
                break
            a, b = best
        found.add((a, b))
    ranked = sorted(found, key=lambda ab: score(*ab))[:REFINE_TOP]
    return [(int(positions[a]), int(positions[b])) for a, b in ranked]


def sizes_index(index: int, positions: np.ndarray) -> int:
    """The candidate position nearest to a size index."""
    return int(positions[np.abs(positions - index).argmin()])


def fit(collective: str, world_size: int, sizes_bytes: np.ndarray, times_us: np.ndarray) -> CollectiveModel:
    """Fit on training rows (any number per size): turning-point candidates and the reference heuristics use the
    median per size, the least squares every row."""
    frame = pd.DataFrame({"m": np.asarray(sizes_bytes, dtype=float), "t": np.asarray(times_us, dtype=float)})
    frame = frame[frame.m > 0]
    per_size = frame.groupby("m")["t"].median().sort_index()
    if len(per_size) < MIN_SIZES:
        raise PmdbError(f"{collective} ws{world_size}: {len(per_size)} distinct message sizes to train on, "
                        f"need at least {MIN_SIZES}")
    sizes, times = per_size.index.to_numpy(), per_size.to_numpy()
    rows_m, rows_t = frame["m"].to_numpy(), frame["t"].to_numpy()
    mul = bus_factor(collective, world_size)
    ref = reference_turning_points(sizes, times, mul)
    pairs = _search_pairs(sizes, rows_m, rows_t, mul, ref)
    refined = [_fit_pair(sizes[a], sizes[b], mul, rows_m, rows_t, 400) for a, b in pairs]
    best, cost = min(refined, key=lambda r: r[1])
    info = {"train_sizes": int(len(sizes)), "train_rows": int(len(frame)), "train_robust_cost": round(cost, 8),
            "reference_turning_points": [float(sizes[ref[0]]), float(sizes[ref[1]])]}
    return CollectiveModel(collective, world_size, best, info)
