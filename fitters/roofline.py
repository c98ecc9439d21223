"""Roofline family, in µs: t = t0 + max(flops / (e_f · peak FLOP/s), bytes / (e_b · peak bandwidth)) + c_f · fresh MiB
+ c_z · zero MiB.

The peaks are the platform's measured ``gemm_flops`` and ``mem_bw`` (``v_platform_peaks``), never a table of device
names; flops, bytes and fresh bytes come from :mod:`fitters.opcost`. The scalars are calibrated on the training rows,
by least squares on ln(time): the fixed per-call cost t0 (µs), the attained fractions e_f, e_b of the peaks and, when
at least two training rows allocate an output above the mmap threshold, the cost c_f (µs per MiB) of mapping it fresh
(page faults and unmap: one efficiency cannot fit both sides of that step; Adam's sqrt of a 51 MB parameter takes
43 ms here, its in-place add_ 4 ms). Otherwise c_f = 0. Likewise c_z (µs per MiB of exact zeros read: the
share Z of an op's input, :mod:`pmdb.traces.state_values`; torch.sqrt of zeros ~4x its time on other values on
the AMD host) when at least two training rows read zeros, else 0. Without training rows (:func:`uncalibrated`)
t0 = c_f = c_z = 0 and e_f = e_b = 1: the pure roofline, the fallback of last resort.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from fitters import opcost
from fitters.model import Model, TrainingSet
from pmdb.errors import PmdbError

REQUIRED_PEAKS = ("gemm_flops", "mem_bw")


class RooflineModel(Model):
    """Roofline over the measured peaks with calibrated overhead and efficiencies; ``predict`` takes op params."""

    family = "roofline"

    def __init__(self, op: str, pass_: str, dtype: str, peak_flops: float, peak_bw: float,
                 t0_us: float = 0.0, eff_flops: float = 1.0, eff_bw: float = 1.0, calibrated: bool = False,
                 fresh_us_per_mib: float = 0.0, zero_us_per_mib: float = 0.0):
        self.op, self.pass_, self.dtype = op, pass_, dtype
        self.peak_flops, self.peak_bw = float(peak_flops), float(peak_bw)
        self.t0_us, self.eff_flops, self.eff_bw = float(t0_us), float(eff_flops), float(eff_bw)
        self.calibrated = calibrated
        self.fresh_us_per_mib = float(fresh_us_per_mib)
        self.zero_us_per_mib = float(zero_us_per_mib)

    def fresh_mib(self, frame: pd.DataFrame) -> np.ndarray:
        """MiB of output each row maps fresh (0 below the mmap threshold and for in-place ops)."""
        return opcost.fresh_bytes(self.op, self.pass_, frame.astype(float), self.dtype) / 2 ** 20

    def bounds_us(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(compute-bound time, memory-bound time) in µs at the peaks, before calibration."""
        flops, moved = opcost.work(self.op, self.pass_, frame.astype(float), self.dtype)
        return flops / self.peak_flops * 1e6, moved / self.peak_bw * 1e6

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        compute, memory = self.bounds_us(frame)
        fresh = self.fresh_us_per_mib * self.fresh_mib(frame) if self.fresh_us_per_mib else 0.0
        zeros = self.zero_us_per_mib * opcost.zero_mib(frame, self.dtype) if self.zero_us_per_mib else 0.0
        return self.t0_us + np.maximum(compute / self.eff_flops, memory / self.eff_bw) + fresh + zeros

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "pass": self.pass_, "dtype": self.dtype, "peak_flops": self.peak_flops,
                "peak_bw": self.peak_bw, "t0_us": self.t0_us, "eff_flops": self.eff_flops, "eff_bw": self.eff_bw,
                "calibrated": self.calibrated, "fresh_us_per_mib": self.fresh_us_per_mib,
                "zero_us_per_mib": self.zero_us_per_mib,
                "features": {"inputs": "op params", "work": "fitters.opcost", "op": self.op, "pass": self.pass_}}

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "RooflineModel":
        return cls(config["op"], config["pass"], config["dtype"], config["peak_flops"], config["peak_bw"],
                   config["t0_us"], config["eff_flops"], config["eff_bw"], config["calibrated"],
                   config.get("fresh_us_per_mib", 0.0),  # versions saved before the fresh-page term have none
                   config.get("zero_us_per_mib", 0.0))   # nor, before the zero-share term, that one


def peaks_of(training: TrainingSet) -> tuple[float, float]:
    missing = [p for p in REQUIRED_PEAKS if not training.peaks.get(p)]
    if missing:
        raise PmdbError(f"the roofline needs the platform's measured peaks ({', '.join(missing)} missing): "
                        f"measure them with the ops collector first")
    return float(training.peaks["gemm_flops"]), float(training.peaks["mem_bw"])


def uncalibrated(op: str, pass_: str, dtype: str, peaks: dict[str, float]) -> RooflineModel:
    """The pure roofline (no training data): t = max(flops / peak, bytes / bandwidth)."""
    flops, bw = peaks_of(TrainingSet(op, pass_, dtype, pd.DataFrame(), np.zeros(0), np.zeros(0), peaks))
    return RooflineModel(op, pass_, dtype, flops, bw)


def fit(training: TrainingSet, seed: int = 0, budget_s: float = 0.0) -> RooflineModel:
    """Calibrate t0, e_f, e_b (and c_f when two or more rows map fresh output) on the training rows (deterministic:
    ``seed`` and ``budget_s`` are not needed)."""
    peak_flops, peak_bw = peaks_of(training)
    base = RooflineModel(training.op, training.pass_, training.dtype, peak_flops, peak_bw)
    compute, memory = base.bounds_us(training.params)
    fresh = base.fresh_mib(training.params)
    zeros = opcost.zero_mib(training.params, training.dtype)
    with_fresh = int(np.count_nonzero(fresh)) >= 2
    with_zeros = int(np.count_nonzero(zeros)) >= 2
    target = np.log(training.times_us)

    def residuals(theta: np.ndarray) -> np.ndarray:
        t0, inv_ef, inv_eb = np.exp(theta[:3])
        extra = list(np.exp(theta[3:]))
        paged = extra.pop(0) * fresh if with_fresh else 0.0
        zeroed = extra.pop(0) * zeros if with_zeros else 0.0
        return np.log(t0 + np.maximum(compute * inv_ef, memory * inv_eb) + paged + zeroed) - target

    start = ([max(float(np.min(training.times_us)) * 0.5, 1e-3), 2.0, 2.0] + ([100.0] if with_fresh else [])
             + ([100.0] if with_zeros else []))
    result = least_squares(residuals, np.log(start), method="trf", loss="soft_l1", f_scale=0.1)
    t0, inv_ef, inv_eb = np.exp(result.x[:3])
    extra = list(np.exp(result.x[3:]))
    return RooflineModel(training.op, training.pass_, training.dtype, peak_flops, peak_bw,
                         t0_us=t0, eff_flops=1.0 / inv_ef, eff_bw=1.0 / inv_eb, calibrated=True,
                         fresh_us_per_mib=float(extra.pop(0)) if with_fresh else 0.0,
                         zero_us_per_mib=float(extra.pop(0)) if with_zeros else 0.0)
