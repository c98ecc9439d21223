"""The host's unprofiled pace from back-to-back op timings, against a profiled trace's host path (µs).

A back-to-back timing (``gpu_kernels/h200_launch_floor.csv``: N calls of one op in a row between two CUDA events,
divided by N, no profiler) is ``max(host dispatch, device time)`` per call. Where the device work is hidden, it is
the host's unprofiled dispatch of one eager op. The rule for those **host-bound rows**, from the file's own rows:

* back to back under :data:`MAX_HOST_US` (100 µs; the rows above are device-bound, and they are the independent
  check of the device-time separation in tests/collectors/importers/test_launch_floor.py: never used here);
* within :data:`PLATEAU_RATIO` (15 %) of the op's fastest back-to-back time (its plateau); and
* the op's plateau spans at least :data:`MIN_WORK_SPAN` (4x) in work (the product of the shape's numbers): the time
  stays flat while the work grows, so the work does not set it. An op without such a plateau gives no host time.

Per op name the unprofiled per-call host time is the median of its host-bound rows (file op names are NeuSight's,
mapped to ATen by :data:`ATEN`). :func:`calibrate` divides it by what a profiled trace's overhead table prices one
top-level call of that op (T1 + T2 + its launches' T4 + T5 between them + T3, as the simulator composes it, from
the raw samples); the median over the matched ops is the profiler's slowing of the host, the scale of every sample.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pmdb.errors import PmdbError

MAX_HOST_US = 100.0      # back to back at or above this the GPU bounds the op (launch_floor's device-bound rows)
PLATEAU_RATIO = 1.15     # a host-bound row lies within this factor of its op's fastest back-to-back time ...
MIN_WORK_SPAN = 4.0      # ... on a plateau whose work (product of the shape's numbers) spans at least this factor
MIN_OPS = 2              # fewer matched op names than this: no calibration (the step's ratio is kept)
FIELDS = ("op", "shape", "back_to_back_us")
ATEN = {"add": "aten::add", "addu": "aten::add", "mul": "aten::mul", "mulu": "aten::mul", "div": "aten::div",
        "divu": "aten::div", "pow": "aten::pow", "powu": "aten::pow", "gelu": "aten::gelu", "relu": "aten::relu",
        "tanh": "aten::tanh", "softmax": "aten::softmax", "ln": "aten::layer_norm", "linear": "aten::linear",
        "bmm": "aten::bmm"}


@dataclass(frozen=True)
class OpPace:
    """One op name: its unprofiled host time per call (µs, median of ``rows`` host-bound rows), the profiled
    trace's price of one call (µs) and their ratio."""

    op_name: str
    unprofiled_us: float
    rows: int
    profiled_us: float | None = None
    ratio: float | None = None


@dataclass(frozen=True)
class Calibration:
    """The profiler's slowing of one trace's host: ``scale`` = median ratio over ``ops`` (None: too few matched)."""

    source: str
    scale: float | None
    ops: list[OpPace] = field(default_factory=list)
    why: str = ""

    def spread(self) -> tuple[float, float] | None:
        ratios = [o.ratio for o in self.ops if o.ratio is not None]
        return (min(ratios), max(ratios)) if ratios else None

    def record(self) -> dict[str, Any]:
        """What a version's params keep of it (no path: the file's name)."""
        out = {"source": self.source, "scale": self.scale, "why": self.why,
               "rule": f"back to back < {MAX_HOST_US:g} us, within {PLATEAU_RATIO:g}x of the op's fastest, on a "
                       f"plateau spanning >= {MIN_WORK_SPAN:g}x in work; median per op, median ratio over ops",
               "ops": [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(o).items()}
                       for o in self.ops]}
        spread = self.spread()
        if spread:
            out["ratio_range"] = [round(spread[0], 4), round(spread[1], 4)]
        return out


def read_pace(path: Path) -> pd.DataFrame:
    """A back-to-back timing file (CSV with columns op, shape, back_to_back_us; µs); a one-line error if not."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise PmdbError(f"{path}: cannot read back-to-back timings ({type(exc).__name__})") from None
    missing = [f for f in FIELDS if f not in frame.columns]
    if missing:
        raise PmdbError(f"{path}: not a back-to-back timing file (no column {', '.join(missing)}; "
                        f"needs {', '.join(FIELDS)})")
    frame = frame[list(FIELDS)].copy()
    frame["back_to_back_us"] = pd.to_numeric(frame["back_to_back_us"], errors="coerce")
    return frame[frame["back_to_back_us"] > 0].reset_index(drop=True)


def _work(shape: str) -> float:
    """Product of the numbers of a shape string ('B=1 H=1024' -> 1024): a size that grows with the op's work."""
    numbers = [float(n) for n in re.findall(r"=(\d+(?:\.\d+)?)", str(shape))]
    return float(np.prod(numbers)) if numbers else float("nan")


def host_bound(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of :func:`read_pace`'s frame whose back-to-back time is the host's (module docstring rule)."""
    kept = []
    for _, rows in frame[frame["back_to_back_us"] < MAX_HOST_US].groupby("op", sort=True):
        plateau = rows[rows["back_to_back_us"] <= PLATEAU_RATIO * rows["back_to_back_us"].min()]
        work = plateau["shape"].map(_work)
        if len(plateau) >= 2 and work.max() >= MIN_WORK_SPAN * work.min():
            kept.append(plateau)
    return pd.concat(kept, ignore_index=True) if kept else frame.iloc[:0]


def unprofiled_pace(frame: pd.DataFrame) -> dict[str, OpPace]:
    """ATen op name -> its unprofiled host time per call (median of its host-bound rows, µs)."""
    rows = host_bound(frame)
    rows = rows.assign(op_name=rows["op"].map(ATEN)).dropna(subset=["op_name"])
    return {name: OpPace(name, float(group["back_to_back_us"].median()), int(len(group)))
            for name, group in rows.groupby("op_name", sort=True)}


def calibrate(source: str, pace: dict[str, OpPace], profiled_us: dict[str, float]) -> Calibration:
    """The scale of one trace's samples: median over op names of unprofiled / profiled per-call host time
    (``profiled_us``: op name -> the trace's raw table price of one top-level call, µs)."""
    matched = [OpPace(p.op_name, p.unprofiled_us, p.rows, profiled_us[n], p.unprofiled_us / profiled_us[n])
               for n, p in pace.items() if profiled_us.get(n, 0.0) > 0.0]
    if len(matched) < MIN_OPS:
        return Calibration(source, None, matched,
                           f"{len(matched)} op name(s) of the trace have host-bound back-to-back rows "
                           f"(fewer than {MIN_OPS})")
    scale = float(np.median([m.ratio for m in matched]))
    return Calibration(source, scale, matched, f"median over {len(matched)} op names of unprofiled back-to-back / "
                                                f"profiled per-call host time")
