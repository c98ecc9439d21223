"""The cross-GPU kernel family: one model per op over every GPU with kernel tables, whose features are the op's sizes
measured against the GPU's spec sheet, so it prices a GPU known only by its specs (after NeuSight, Lee et al.,
ASPLOS'25: predict the utilisation a kernel attains, bounded by the roofline, instead of its latency).

For each row (µs, FLOP, bytes):

1. the kernel is cut into tiles the way GPU libraries do (GEMM, conv as implicit GEMM: 128 x 128 output tiles with the
   whole reduction; row ops: one row per block; element-wise: 512 elements per 128-thread block), the tiles run in
   waves of (SMs x resident tiles per SM);
2. the wave roofline: t_roof = waves x max(tile FLOP / (peak FP32 / SMs), tile bytes / (bandwidth / SMs)), never
   below the whole-kernel roofline max(FLOP / peak, bytes / bandwidth); a GEMM's (and conv's) tiles are bound by
   their FLOPs only (their operands come through L2, shared by the tiles of a row and a column; per-tile bytes at
   DRAM bandwidth made every GEMM memory bound on a sheet with a high FP32/bandwidth ratio such as the L4's);
3. a gradient-boosted regressor predicts ln(t / t_roof) = -ln(utilisation) from the op's sizes and GPU-relative
   quantities only: tiles and waves, the wave fill, the rooflines in µs, tiles per SM, the wave quantisation and the
   roofline over the kernel floor; convolutions also the arithmetic intensity over the GPU's ridge point and the
   bytes moved over its L2 (:data:`RATIO_FEATURE_OPS`). The raw spec figures, and for other ops those two sheet
   ratios, are deliberately NOT features: with five GPUs to learn from, a tree uses them as a GPU's name and prices
   an unseen GPU like whichever training GPU its figures fall next to (leave-one-GPU-out error was higher: softmax
   17.6 -> 12.8 %, layer norm 15.0 -> 12.6 %, GEMM 19.3 -> 18.9 % mean without the ratios, 2026-11-28);
   the floor is the op's 1 % time quantile on each training GPU (since the tables' host floor is removed at import,
   :mod:`collectors.importers.launch_floor`, it is the bound 0.44 F the hidden small kernels sit at, F = 25-63 µs
   set by the table's host and driver, not by the sheet), and an unseen GPU gets the median of the training GPUs'
   floors (its own is unknowable from a sheet). Without the floor feature the trees priced an unseen GPU's
   small kernels at the floor of the training GPU nearest in specs (leave-one-GPU-out among P4, P100, T4, V100:
   softmax 18.5 -> 14.6 %, relu 19.3 -> 14.7 %, add 15.2 -> 11.4 %, fully_connected 25.3 -> 23.6 % mean GMAE);
4. t = t_roof / u with u clipped to (0, u_max], u_max the largest utilisation seen in training (1 when the
   roofline holds; a little above where a working set that fits in L2 beats DRAM bandwidth, or where cuDNN's
   Winograd/FFT convolutions do fewer FLOPs than the direct count);
5. a GEMM with more rows than any trained on is priced as k = ceil(M / M_max) chunks within them
   (:func:`fitters.gemm_shapes.chunk_rows`): its time grows with its waves, where the trees alone stay flat;
6. a fully_connected model trained on SMs no wider than 64 FP32 lanes (every NeuSight table GPU) prices a GPU of
   wider SMs times the shipped lane correction (:mod:`pmdb.samples.lane_attainment`: x1.30 at 128 lanes, measured
   on an H200's GEMMs timed back to back): with 32 lanes per warp scheduler an FFMA must issue every clock to hold
   the sheet's rate, so a GEMM's other instructions cost FMA throughput, which no 64-lane table shows
   (:func:`lanes_for`; saved with the version, so a version prices as it did when registered).

What transfers and what does not (benchmarks/results/gpu_kernel_accuracy.md): the utilisation of large kernels
transfers within ~10-20 %; the floor of small kernels does not, so floor-dominated ops of an unseen GPU are off by
the difference of its floor from the training GPUs' median, and a GPU that attains an unusual fraction of its sheet's
peaks (the 70 W T4 and P4 hold far less than their boost-clock FLOP/s) is off by that fraction.

GEMM-shaped ops in the backward pass are priced as their forward GEMMs (:mod:`fitters.gemm_shapes`). Every GPU
taking part needs a spec sheet (``pmdb platform-specs``); rows are the GPUs' forward kernel device times (cache
state ``device``; imported single-call tables with their host floor removed). :func:`fit_for_target` registers
versions for a GPU known only by its sheet (``pmdb fit cross-gpu``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import skops.io as sio
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from collectors import gpu_specs
from fitters import features as feats, gemm_shapes, opcost
from fitters.model import Model
from fitters.split import split_rows
from pmdb import metrics, platform as platforms
from pmdb.errors import PmdbError
from pmdb.samples import lane_attainment
from pmdb.store import Store

SPEC_FEATURES = ("fp32_flops", "mem_bw", "sm_count", "cores_per_sm", "clock_mhz", "l2_bytes")
REQUIRED_SPECS = ("fp32_flops", "mem_bw", "sm_count")   # what the wave roofline needs
GEMM_TILE = 128             # output tile side (elements) of GEMMs and implicit-GEMM convolutions
VECTOR_BLOCK = 512          # elements per block of element-wise kernels (128 threads x 4)
RESIDENT_BLOCKS = 4         # tiles resident per SM at once (a nominal occupancy)
DEFAULT_L2_BYTES = 4 * 2 ** 20   # a sheet without L2Cache
ROW_OPS = frozenset({"softmax", "layer_norm", "log_softmax", "batch_norm"})
CONV_OPS = frozenset({"conv2d"})
GEMM_BACKWARD_OPS = ("fully_connected", "bmm")   # ops whose backward GEMMs are registered beside the forward model
MIN_ROWS = 10
WEIGHTS_FILE = "model.skops"
TRUSTED_TYPES = {"sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
                 "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
                 "sklearn._loss.loss.HalfSquaredError", "sklearn._loss.loss.AbsoluteError",
                 "sklearn._loss.link.IdentityLink", "sklearn._loss.link.Interval"}
# Fixed, not searched: small trees and strong leaves transfer to an unseen GPU as well as big ones did (within 1% of
# leave-one-GPU-out GMAE on the development GPUs P4, P100, T4, V100) and fit 5x faster.
HYPER = {"loss": "squared_error", "learning_rate": 0.08, "max_leaf_nodes": 15, "l2_regularization": 1.0,
         "max_iter": 300, "min_samples_leaf": 50}
FEATURE_NAMES = ("ln_tiles", "ln_waves", "wave_fill", "ln_roof_us", "ln_kernel_roof_us", "ln_tiles_per_sm",
                 "ln_wave_quantisation", "ln_roof_over_floor")
# Features built on the sheet's FP32/bandwidth ratio and L2 size, kept for convolutions only (cuDNN's algorithm
# follows the conv's intensity; leave-one-GPU-out conv 15.93 % with them, 17.94 % without): elsewhere they let the
# trees tell the training GPUs apart and price an unseen GPU like the one nearest in ratio (softmax 17.57 -> 12.82 %,
# layer norm 15.04 -> 12.56 % without them). Beyond the training GPUs' ratios (the L4's 104 FLOP/B) a tree holds
# them at the edge of the range it saw.
RATIO_FEATURE_NAMES = ("ln_intensity_over_ridge", "ln_bytes_over_l2")
RATIO_FEATURE_OPS = CONV_OPS
FEATURE_SET = 2             # 1: before 2026-11-28 (every op all ten features, GEMM tiles' bytes in the wave roof)
LEGACY_FEATURE_NAMES = ("ln_tiles", "ln_waves", "wave_fill", "ln_roof_us", "ln_kernel_roof_us",
                        "ln_intensity_over_ridge", "ln_bytes_over_l2", "ln_tiles_per_sm", "ln_wave_quantisation",
                        "ln_roof_over_floor")
FLOOR_QUANTILE = 0.01       # a GPU's floor for an op: this quantile of its latencies (µs)
# Sheet figures a target is checked against its sources' span with (:func:`sheet_outside`): (figure, label, unit,
# divisor of the stored value); 'flop_per_byte' is fp32_flops / mem_bw, the sheet's ridge point.
SPAN_FIGURES = (("fp32_flops", "FP32 rate", "TFLOP/s", 1e12), ("mem_bw", "bandwidth", "GB/s", 1e9),
                ("flop_per_byte", "FP32 per byte", "FLOP/B", 1.0), ("sm_count", "SMs", "", 1.0),
                ("cores_per_sm", "FP32 lanes per SM", "", 1.0), ("l2_bytes", "L2", "MiB", 2.0 ** 20))


def _col(frame: pd.DataFrame, name: str, default: float = 1.0) -> np.ndarray:
    if name in frame.columns:
        return pd.to_numeric(frame[name], errors="coerce").fillna(default).to_numpy(dtype=float)
    return np.full(len(frame), default)


def _gemm_dims(op: str, params: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(batch, rows, columns, reduction) of the GEMM an op runs (convolutions as implicit GEMM)."""
    if op in CONV_OPS:
        b, h, ic, oc = (_col(params, c) for c in ("B", "H", "IC", "OC"))
        fh, fw, stride, dil = (_col(params, c) for c in ("FH", "FW", "stride", "dilation"))
        groups = np.where(_col(params, "is_depthwise", 0.0) > 0, ic, _col(params, "groups"))
        oh = np.maximum(np.floor((h - dil * (fh - 1) - 1) / stride) + 1, 1)
        ow = np.maximum(np.floor((h - dil * (fw - 1) - 1) / stride) + 1, 1)
        return groups, b * oh * ow, oc / groups, ic / groups * fh * fw
    b, m, n, k = (_col(params, c) for c in ("B", "M", "N", "K"))
    if gemm_shapes.GEMM_ALIASES.get(op) == "fully_connected":
        m, b = m * b, np.ones(len(params))   # a batched linear input is one GEMM of B·M rows
    return b, m, n, k


def _spec_arrays(specs: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    peak, bw, sms = (specs[c].to_numpy(dtype=float) for c in REQUIRED_SPECS)
    l2 = specs["l2_bytes"].astype(float).fillna(DEFAULT_L2_BYTES).to_numpy() if "l2_bytes" in specs.columns \
        else np.full(len(specs), float(DEFAULT_L2_BYTES))
    return peak, bw, sms, l2


def work_frame(op: str, pass_: str, dtype: str, params: pd.DataFrame, specs: pd.DataFrame,
               tile_bytes_bound: bool = False) -> pd.DataFrame:
    """Per-row work, tiles, waves and rooflines (µs) of ``op`` on the GPUs of ``specs`` (aligned rows). A GEMM's (or
    implicit-GEMM conv's) wave is bound by its tiles' FLOPs only: a tile's operands are read through L2 and shared by
    the tiles of its row and column, so charging each tile its own bytes at DRAM bandwidth / SMs made a GPU with a
    high FP32/bandwidth ratio (L4: 104 FLOP/B, every table GPU 12-30) look memory bound on every GEMM; the kernel's
    own bytes (each operand once) still bound it through the kernel roofline. ``tile_bytes_bound`` restores the old
    per-tile bytes bound (models saved with :data:`FEATURE_SET` 1)."""
    params = params.reset_index(drop=True).astype(float)
    flops, moved = opcost.work(op, pass_, params, dtype)
    it = float(opcost.ITEMSIZE.get(dtype, 4))
    peak, bw, sms, _ = _spec_arrays(specs.reset_index(drop=True))
    if op in gemm_shapes.GEMM_ALIASES or op in CONV_OPS:
        b, m, n, k = _gemm_dims(op, params)
        tiles = b * np.ceil(m / GEMM_TILE) * np.ceil(n / GEMM_TILE)
        tile_m, tile_n = np.minimum(m, GEMM_TILE), np.minimum(n, GEMM_TILE)
        tile_flops = 2 * tile_m * tile_n * k
        tile_bytes = it * (tile_m * k + k * tile_n + tile_m * tile_n)
        resident = np.ones(len(params))
    elif op in ROW_OPS:
        tiles = opcost.numel(params) / np.maximum(_col(params, "N"), 1)
        tile_flops, tile_bytes = flops / np.maximum(tiles, 1), moved / np.maximum(tiles, 1)
        resident = np.full(len(params), 4.0 * RESIDENT_BLOCKS)
    else:
        tiles = np.ceil(opcost.numel(params) / VECTOR_BLOCK)
        tile_flops, tile_bytes = flops / np.maximum(tiles, 1), moved / np.maximum(tiles, 1)
        resident = np.full(len(params), float(RESIDENT_BLOCKS))
    slots = sms * resident
    waves = np.ceil(np.maximum(tiles, 1) / slots)
    per_sm = tile_flops * resident / (peak / sms)
    if tile_bytes_bound or not (op in gemm_shapes.GEMM_ALIASES or op in CONV_OPS):
        per_sm = np.maximum(per_sm, tile_bytes * resident / (bw / sms))
    wave_roof = waves * per_sm * 1e6
    kernel_roof = np.maximum(flops / peak, moved / bw) * 1e6
    roof = np.maximum(np.maximum(wave_roof, kernel_roof), 1e-3)
    return pd.DataFrame({"flops": flops, "bytes": moved, "tiles": tiles, "waves": waves,
                         "fill": np.maximum(tiles, 1) / (waves * slots), "kernel_roof_us": kernel_roof,
                         "roof_us": roof})


def _matrix(op: str, dtype: str, params: pd.DataFrame, specs: pd.DataFrame, param_names: tuple[str, ...],
            floor_us: np.ndarray, feature_set: int = FEATURE_SET) -> tuple[np.ndarray, np.ndarray]:
    """(feature matrix, wave roofline µs) of each row (forward pass); ``floor_us`` is each row's GPU floor,
    ``feature_set`` 1 the features of models saved before :data:`FEATURE_SET` 2."""
    params, specs = params.reset_index(drop=True), specs.reset_index(drop=True)
    legacy = feature_set < 2
    work = work_frame(op, "fwd", dtype, params, specs, tile_bytes_bound=legacy)
    peak, bw, sms, l2 = _spec_arrays(specs)
    flops, moved = work["flops"].to_numpy(), work["bytes"].to_numpy()
    tiles, roof = work["tiles"].to_numpy(), work["roof_us"].to_numpy()
    kernel_roof = np.maximum(work["kernel_roof_us"].to_numpy(), 1e-3)
    intensity = flops / np.maximum(moved, 1.0)
    over_ridge, over_l2 = np.log1p(intensity) - np.log(peak / bw), np.log1p(moved) - np.log(l2)
    over_floor = np.log(roof) - np.log(np.maximum(np.asarray(floor_us, dtype=float), 1e-3))
    columns = [np.log(np.maximum(_col(params, p), 1e-9)) for p in param_names]
    columns += [np.log1p(tiles), np.log1p(work["waves"].to_numpy()), work["fill"].to_numpy(), np.log(roof),
                np.log(kernel_roof)]
    if legacy:
        columns += [over_ridge, over_l2, np.log1p(tiles) - np.log(sms), np.log(roof) - np.log(kernel_roof),
                    over_floor]
        return np.column_stack(columns), roof
    columns += [np.log1p(tiles) - np.log(sms), np.log(roof) - np.log(kernel_roof), over_floor]
    if op in RATIO_FEATURE_OPS:
        columns += [over_ridge, over_l2]
    return np.column_stack(columns), roof


def floors_of(times_us: np.ndarray, gpu: np.ndarray) -> dict[str, float]:
    """Each GPU's floor for an op: the :data:`FLOOR_QUANTILE` of its latencies (µs)."""
    return {str(g): float(np.quantile(times_us[gpu == g], FLOOR_QUANTILE)) for g in sorted(set(gpu))}


def _feature_names(op: str, param_names: tuple[str, ...], feature_set: int = FEATURE_SET) -> list[str]:
    if feature_set < 2:
        return [f"ln_{p}" for p in param_names] + list(LEGACY_FEATURE_NAMES)
    ratios = list(RATIO_FEATURE_NAMES) if op in RATIO_FEATURE_OPS else []
    return [f"ln_{p}" for p in param_names] + list(FEATURE_NAMES) + ratios


def _check_specs(specs: pd.DataFrame, what: str) -> None:
    for name in REQUIRED_SPECS:
        values = specs[name].to_numpy(dtype=float)
        if not (np.isfinite(values) & (values > 0)).all():
            raise PmdbError(f"{what}: a spec sheet lacks {name} (the cross-GPU models need FP32 rate, bandwidth "
                            f"and SM count: SingleFLOPs, Mem_Bw, Num_Sm)")


class CrossGpuModel(Model):
    """Utilisation model of one op over GPUs; ``predict`` takes the op's parameter columns and prices them on the GPU
    whose specs the model is bound to (``for_gpu``) or on per-row spec columns (``SPEC_FEATURES``)."""

    family = "cross_gpu"

    def __init__(self, op: str, dtype: str, param_names: tuple[str, ...], estimator: HistGradientBoostingRegressor,
                 max_util: float, gpus: list[str], target: dict[str, Any] | None = None,
                 info: dict[str, Any] | None = None, constants: dict[str, float] | None = None,
                 floors: dict[str, float] | None = None, row_limit: float | None = None,
                 feature_set: int = FEATURE_SET, lanes: dict[str, Any] | None = None):
        self.op, self.dtype, self.param_names = op, dtype, tuple(param_names)
        self.feature_set = int(feature_set)   # 1: saved before the features of FEATURE_SET 2
        self.row_limit = float(row_limit) if row_limit else None   # GEMMs: the largest rows M trained on
        self.estimator, self.max_util, self.gpus = estimator, float(max_util), list(gpus)
        self.target, self.info, self.constants = target, info or {}, dict(constants or {})
        self.floors = {str(k): float(v) for k, v in (floors or {}).items()}
        # wider SMs than the sources': the measured time multiplier (None: not applied, or saved before it)
        self.lanes = lane_attainment.LaneAttainment.from_dict(lanes) if lanes else None

    @property
    def floor_us(self) -> float:
        """The floor assumed for a GPU the model did not see: the median of the training GPUs' floors."""
        return float(np.median(list(self.floors.values()))) if self.floors else 1.0

    def floor_of(self, gpu: str) -> float:
        """A training GPU's own floor, else :attr:`floor_us`."""
        return self.floors.get(gpu, self.floor_us)

    def for_gpu(self, sheet: gpu_specs.GpuSheet, name: str) -> "CrossGpuModel":
        """The same model bound to one GPU's specs (what a registered version of a platform holds); its floor is its
        own when it was a training GPU, else the training GPUs' median."""
        known = {k: (None if math.isnan(v) else v) for k, v in sheet.features().items()}   # JSON: no NaN
        target = {"platform": name, **known, "device": sheet.device, "floor_us": self.floor_of(name)}
        return CrossGpuModel(self.op, self.dtype, self.param_names, self.estimator, self.max_util, self.gpus,
                             target, self.info, self.constants, self.floors, self.row_limit, self.feature_set,
                             self.lanes.as_dict() if self.lanes else None)

    def lane_factor(self, lanes: float) -> float:
        """The time multiplier of a GPU whose SMs have ``lanes`` FP32 lanes (1 where no lane correction applies)."""
        return self.lanes.factor(float(lanes)) if self.lanes else 1.0

    def _floor(self, frame: pd.DataFrame) -> np.ndarray:
        """Each row's GPU floor: a ``floor_us`` column, else the bound GPU's, else the training median."""
        if "floor_us" in frame.columns:
            return pd.to_numeric(frame["floor_us"], errors="coerce").fillna(self.floor_us).to_numpy(dtype=float)
        bound = (self.target or {}).get("floor_us")
        return np.full(len(frame), float(bound) if bound else self.floor_us)

    def _specs(self, frame: pd.DataFrame) -> pd.DataFrame:
        if all(c in frame.columns for c in REQUIRED_SPECS):
            specs = frame[[c for c in SPEC_FEATURES if c in frame.columns]].astype(float).reset_index(drop=True)
        elif self.target is None:
            raise PmdbError(f"the cross-GPU {self.op} model is bound to no GPU: give spec columns "
                            f"{', '.join(SPEC_FEATURES)}")
        else:
            specs = pd.DataFrame({c: np.full(len(frame), math.nan if self.target.get(c) is None
                                             else float(self.target[c])) for c in SPEC_FEATURES})
        _check_specs(specs, f"cross-GPU {self.op} model")
        return specs

    def predict_pass(self, frame: pd.DataFrame, pass_: str = "fwd") -> np.ndarray:
        """µs of each row in ``pass_``; GEMM-shaped backward passes as the sum of their forward GEMMs."""
        frame = frame.reset_index(drop=True)
        specs, floor = self._specs(frame), self._floor(frame)
        frame = frame.drop(columns=[c for c in (*SPEC_FEATURES, "floor_us") if c in frame.columns])
        if pass_ == "fwd":
            return self._predict_fwd(frame, specs, floor)
        if self.op not in gemm_shapes.GEMM_ALIASES:
            raise PmdbError(f"the cross-GPU {self.op} model prices the forward pass only (backward: GEMM-shaped ops)")
        return sum(self._predict_fwd(part, specs, floor) for part in gemm_shapes.shapes(self.op, pass_, frame))

    def _predict_fwd(self, params: pd.DataFrame, specs: pd.DataFrame, floor: np.ndarray) -> np.ndarray:
        if len(params) == 0:
            return np.zeros(0)
        params = feats.fold_rows(self.op, params, self.constants)
        params, chunks = self._chunked(params)
        x, roof = _matrix(self.op, self.dtype, params, specs, self.param_names, floor, self.feature_set)
        with threadpool_limits(1):
            log_slowdown = self.estimator.predict(x)
        utilisation = np.clip(np.exp(-log_slowdown), 1e-6, self.max_util)
        times = roof / utilisation * chunks
        if self.lanes:   # each row's GPU by its own SM width (one factor per width present)
            widths, row_width = np.unique(_col(specs, "cores_per_sm", math.nan), return_inverse=True)
            times = times * np.array([self.lanes.factor(float(w)) for w in widths])[row_width.reshape(-1)]
        return times

    def _chunked(self, params: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
        """GEMMs with more rows than trained on as chunks within the trained rows (:func:`gemm_shapes.chunk_rows`:
        the time scales with the waves, where the trees would stay flat); other ops as they are."""
        if not self.row_limit or self.op not in gemm_shapes.GEMM_ALIASES or "M" not in params.columns:
            return params, np.ones(len(params))
        if gemm_shapes.GEMM_ALIASES[self.op] == "fully_connected" and "B" in params.columns:
            params = params.assign(M=_col(params, "M") * _col(params, "B"), B=1.0)   # one GEMM of B·M rows
        return gemm_shapes.chunk_rows(params, self.row_limit)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return self.predict_pass(frame, "fwd")

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "dtype": self.dtype, "params": list(self.param_names), "max_util": self.max_util,
                "gpus": self.gpus, "target": self.target, "hyper": HYPER, "info": self.info,
                "constants": self.constants, "floors": self.floors, "floor_us": self.floor_us,
                "row_limit": self.row_limit, "feature_set": self.feature_set,
                "lanes": self.lanes.as_dict() if self.lanes else None,
                "features": {"names": _feature_names(self.op, self.param_names, self.feature_set),
                             "target": "ln(t / wave roofline)",
                             "specs": list(REQUIRED_SPECS) + ["l2_bytes"], "op": self.op,
                             "constants": self.constants}}

    def save_weights(self, directory: Path) -> None:
        sio.dump(self.estimator, Path(directory) / WEIGHTS_FILE)

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "CrossGpuModel":
        path = Path(directory) / WEIGHTS_FILE
        untrusted = set(sio.get_untrusted_types(file=path))
        if untrusted - TRUSTED_TYPES:
            raise PmdbError(f"{path} holds types a cross-GPU model never has: "
                            f"{', '.join(sorted(untrusted - TRUSTED_TYPES))}")
        return cls(config["op"], config["dtype"], tuple(config["params"]), sio.load(path, trusted=sorted(untrusted)),
                   config["max_util"], config["gpus"], config.get("target"), config.get("info"),
                   config.get("constants"), config.get("floors"), config.get("row_limit"),  # None: saved before
                   config.get("feature_set", 1),   # saved before feature set 2: set 1
                   config.get("lanes"))            # saved before the lane correction: none


# ---- data and fitting ------------------------------------------------------------------------------------------
@dataclass
class CrossGpuData:
    """Forward device timings of one op on every GPU with specs: params, times (µs), GPU, config keys, specs."""

    op: str
    dtype: str
    params: pd.DataFrame
    times_us: np.ndarray
    gpu: np.ndarray
    config_key: np.ndarray
    specs: pd.DataFrame          # one row per measurement (SPEC_FEATURES columns)
    measurement_id: np.ndarray
    run_id: np.ndarray

    def __len__(self) -> int:
        return len(self.times_us)

    def subset(self, rows: np.ndarray) -> "CrossGpuData":
        return CrossGpuData(self.op, self.dtype, self.params.iloc[rows].reset_index(drop=True), self.times_us[rows],
                            self.gpu[rows], self.config_key[rows], self.specs.iloc[rows].reset_index(drop=True),
                            self.measurement_id[rows], self.run_id[rows])

    def sample(self, per_gpu: int | None, seed: int = 0) -> "CrossGpuData":
        """At most ``per_gpu`` rows of each GPU, drawn with ``seed`` (all rows when None or when fewer)."""
        if not per_gpu:
            return self
        rng = np.random.default_rng(seed)
        keep = [rows if rows.size <= per_gpu else np.sort(rng.choice(rows, per_gpu, replace=False))
                for rows in (np.flatnonzero(self.gpu == g) for g in sorted(set(self.gpu)))]
        return self.subset(np.sort(np.concatenate(keep))) if keep else self

    def with_specs(self, floors: dict[str, float] | None = None) -> pd.DataFrame:
        """The params with the rows' spec columns (what :meth:`CrossGpuModel.predict` takes for many GPUs), and their
        GPUs' floors where ``floors`` knows them (the model's training GPUs; others get its median)."""
        frame = pd.concat([self.params, self.specs], axis=1)
        if floors:
            frame["floor_us"] = [floors.get(str(g), np.nan) for g in self.gpu]
        return frame


def gpus_with_tables(store: Store) -> pd.DataFrame:
    """Platforms with a usable spec sheet and forward device timings: platform, op, rows."""
    return store.query("SELECT m.platform, m.op, count(*) AS rows FROM v_op_measurements m "
                       "JOIN gpu_specs s ON s.platform = m.platform WHERE m.cache_state = 'device' "
                       "AND m.pass = 'fwd' AND s.fp32_flops > 0 AND s.mem_bw > 0 AND s.sm_count > 0 "
                       "GROUP BY ALL ORDER BY m.platform, m.op")


def load_data(store: Store, op: str, platforms_: list[str] | None = None, dtype: str = "float32") -> CrossGpuData:
    """Rows of ``op`` (forward, device timings, ``dtype``) on ``platforms_`` (default: every GPU with specs)."""
    sql = ("SELECT m.measurement_id, m.run_id, m.platform, m.config_key, CAST(m.params AS VARCHAR) AS params, "
           f"m.median_us, {', '.join('s.' + c for c in SPEC_FEATURES)} FROM v_op_measurements m "
           "JOIN gpu_specs s ON s.platform = m.platform WHERE m.op = ? AND m.pass = 'fwd' AND m.dtype = ? "
           "AND m.cache_state = 'device' AND s.fp32_flops > 0 AND s.mem_bw > 0 AND s.sm_count > 0")
    args: list[Any] = [op, dtype]
    if platforms_:
        sql += f" AND m.platform IN ({', '.join('?' * len(platforms_))})"
        args += list(platforms_)
    frame = store.query(sql + " ORDER BY m.measurement_id", args)
    times = pd.to_numeric(frame["median_us"], errors="coerce").to_numpy(dtype=float)
    frame = frame[np.isfinite(times) & (times > 0)].reset_index(drop=True)
    params = feats.params_frame(frame["params"]) if len(frame) else pd.DataFrame()
    specs = frame[list(SPEC_FEATURES)].astype(float)
    return CrossGpuData(op, dtype, params, frame["median_us"].to_numpy(dtype=float), frame["platform"].to_numpy(),
                        frame["config_key"].to_numpy(), specs, frame["measurement_id"].to_numpy(),
                        frame["run_id"].to_numpy())


def lanes_for(op: str, specs: pd.DataFrame) -> lane_attainment.LaneAttainment | None:
    """The lane correction a model of ``op`` trained on GPUs of ``specs`` carries: the shipped sample
    (:mod:`pmdb.samples.lane_attainment`) where the op is one it was measured for and every source's SMs are known
    and no wider than the sample's sources' (wider sources teach the trees themselves), else None."""
    sample = lane_attainment.load()
    widths = _col(specs, "cores_per_sm", math.nan)
    if gemm_shapes.GEMM_ALIASES.get(op, op) not in sample.ops or not len(widths) or not np.isfinite(widths).all():
        return None
    return sample if widths.max() <= sample.source_lanes_per_sm else None


def fit(data: CrossGpuData, seed: int = 0, hyper: dict[str, Any] | None = None, lanes: bool = True
        ) -> CrossGpuModel:
    """Fit one op's utilisation model on ``data`` (every GPU in it); deterministic for a seed. ``lanes`` False
    leaves out the lane correction (:func:`lanes_for`; what measuring that correction needs)."""
    if len(data) < MIN_ROWS:
        raise PmdbError(f"{data.op}: {len(data)} rows on GPUs with specs: too few to fit (need {MIN_ROWS})")
    _check_specs(data.specs, data.op)
    params = data.params
    names = tuple(sorted(c for c in params.columns if params[c].nunique() > 1 and (params[c] > 0).all()))
    constants = {c: float(params[c].iloc[0]) for c in params.columns if params[c].nunique() <= 1}
    floors = floors_of(data.times_us, data.gpu)
    x, roof = _matrix(data.op, data.dtype, params, data.specs, names, np.array([floors[str(g)] for g in data.gpu]))
    y = np.log(data.times_us / roof)
    settings = {**HYPER, **(hyper or {})}
    settings["min_samples_leaf"] = int(min(settings["min_samples_leaf"], max(len(y) // 20, 2)))
    estimator = HistGradientBoostingRegressor(random_state=seed, early_stopping=False, **settings)
    with threadpool_limits(1):
        estimator.fit(x, y)
    max_util = float(max(1.0, np.quantile(np.exp(-y), 0.999)))
    row_limit = float(_gemm_dims(data.op, params)[1].max()) if data.op in gemm_shapes.GEMM_ALIASES else None
    correction = lanes_for(data.op, data.specs) if lanes else None
    return CrossGpuModel(data.op, data.dtype, names, estimator, max_util, sorted(set(data.gpu)),
                         info={"rows": int(len(y)), "seed": seed}, constants=constants, floors=floors,
                         row_limit=row_limit, lanes=correction.as_dict() if correction else None)


def held_out(data: CrossGpuData, seed: int = 0) -> dict[str, Any]:
    """Seeded 80/20 split by (GPU, configuration): fit on the training side of every GPU, score each GPU's test side.
    Returns {'per_gpu': {gpu: metrics}, 'all': metrics}."""
    split = split_rows(pd.Series(data.gpu).astype(str) + "/" + pd.Series(data.config_key).astype(str), seed)
    model = fit(data.subset(split.train), seed)
    test = data.subset(split.test)
    predicted = model.predict(test.with_specs(model.floors))   # seen GPUs: their floors from the training side
    out: dict[str, Any] = {"per_gpu": {}, "all": metrics.summary(predicted, test.times_us)}
    for gpu in sorted(set(test.gpu)):
        rows = test.gpu == gpu
        out["per_gpu"][gpu] = metrics.summary(predicted[rows], test.times_us[rows])
    return out


def leave_one_gpu_out(data: CrossGpuData, seed: int = 0, gpus: list[str] | None = None,
                      predictions: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
                      ) -> dict[str, dict[str, float]]:
    """Train on every GPU but one, test on all rows of that one (needs two training GPUs): {held-out gpu: metrics}.
    ``gpus`` limits which GPUs are held out; ``predictions`` (if given) receives {gpu: (predicted, measured)}."""
    out = {}
    for gpu in gpus or sorted(set(data.gpu)):
        train = np.flatnonzero(data.gpu != gpu)
        test_rows = np.flatnonzero(data.gpu == gpu)
        if len(set(data.gpu[train])) < 2 or test_rows.size == 0:
            continue
        model = fit(data.subset(train), seed)
        test = data.subset(test_rows)
        predicted = model.predict(test.with_specs())
        out[gpu] = metrics.summary(predicted, test.times_us)
        if predictions is not None:
            predictions[gpu] = (predicted, test.times_us)
    return out


# ---- registering versions for a GPU known only by its specs -------------------------------------------------------
@dataclass
class CrossGpuOptions:
    """What `pmdb fit cross-gpu` asked for."""

    target: str                       # platform to register versions for (needs specs)
    ops: list[str] | None = None      # None = every op with tables on at least two GPUs
    sources: list[str] | None = None  # GPUs to train on (default: every GPU with specs and tables, minus the target)
    seed: int = 0
    max_rows_per_gpu: int | None = None   # subsample each source GPU's rows (seeded) to bound the fit time
    logo: bool = True                 # score a spec-only target by leave-one-GPU-out over the sources
    promote: bool = False             # make this fit's versions the champions even where a name has one
    lanes: bool = True                # the lane correction where it applies (:func:`lanes_for`)
    progress: Callable[[str], None] | None = None


def _check_target(store: Store, target: str) -> gpu_specs.GpuSheet:
    found = platforms.find(store, target)
    if found is None:
        with_specs = gpu_specs.all_specs(store)["platform"].tolist()
        raise PmdbError(f"unknown platform {target!r} (platforms with spec sheets: {', '.join(with_specs) or 'none'}; "
                        f"register one with `pmdb platform-specs FILE --name {target}`)")
    sheet = gpu_specs.load(store, target)
    if sheet is None:
        raise PmdbError(f"platform {target!r} has no GPU spec sheet: register one with "
                        f"`pmdb platform-specs FILE --name {target}`")
    lacking = [f for f in REQUIRED_SPECS if not getattr(sheet, f)]
    if lacking:
        raise PmdbError(f"platform {target!r}: its spec sheet lacks {', '.join(lacking)} (the cross-GPU models need "
                        f"SingleFLOPs, Mem_Bw and Num_Sm): register a full sheet with `pmdb platform-specs`")
    return sheet


def plan_target(store: Store, options: CrossGpuOptions) -> tuple[gpu_specs.GpuSheet, list[str], list[str]]:
    """(target sheet, source GPUs, ops) of a cross-GPU fit; a one-line PmdbError for anything that cannot work."""
    sheet = _check_target(store, options.target)
    tables = gpus_with_tables(store)
    have = sorted(set(tables["platform"]))
    sources = sorted(set(options.sources)) if options.sources else [g for g in have if g != options.target]
    if options.target in sources:
        raise PmdbError(f"the target {options.target} cannot be one of its own sources")
    unknown = [g for g in sources if g not in have]
    if unknown:
        raise PmdbError(f"no spec sheet or no device timings for source GPU(s) {', '.join(unknown)} "
                        f"(GPUs with both: {', '.join(have) or 'none'})")
    per_op = tables[tables["platform"].isin(sources)].groupby("op")["platform"].nunique()
    if options.ops:
        missing = [o for o in options.ops if per_op.get(o, 0) < 2]
        if missing:
            usable = ", ".join(per_op[per_op >= 2].index) or "none"
            raise PmdbError(f"too few source GPUs with tables of {', '.join(missing)} (need 2; ops with enough: "
                            f"{usable})")
        ops = list(dict.fromkeys(options.ops))
    else:
        ops = sorted(per_op[per_op >= 2].index)
    if not ops:
        raise PmdbError("no op has tables on two or more GPUs with spec sheets (besides the target): import tables "
                        "(`pmdb collect import-ops`) and register their GPUs' sheets (`pmdb platform-specs`)")
    return sheet, sources, ops


def fit_for_target(store: Store, workspace: Any, options: CrossGpuOptions) -> tuple[pd.DataFrame, list[str]]:
    """Fit one cross-GPU model per op on the source GPUs and register it on the target platform, bound to its specs;
    fully_connected and bmm also get a backward version (their backward GEMMs, :mod:`fitters.gemm_shapes`).
    Test metrics: the target's own rows when it has tables (never trained on), else the leave-one-GPU-out metrics
    over the sources, each held-out GPU counted once (a GPU the model never saw, as the target is).
    ``champion`` moves to a new version only where the model name has no champion yet (a target with its own
    fitted models keeps them, and an earlier cross-GPU fit's champions stay: their leave-one-GPU-out metrics were taken
    over other sources, so the two cannot be ranked), unless ``promote``; one note names what kept its champion.
    Returns (one row per version, notes)."""
    from fitters.evaluate import data_hash, error_histogram
    from fitters.registry import Registry, VersionRecord, kernel_model_name

    sheet, sources, ops = plan_target(store, options)
    notes: list[str] = []
    outside = sheet_outside(sheet.features(), [found.features() for found in
                                               (gpu_specs.load(store, g) for g in sources) if found is not None])
    if outside:
        notes.append(f"{options.target}'s sheet lies outside its sources' span: {describe_outside(outside)}; "
                     f"its kernels are priced beyond what the sources showed")
    registry = Registry(workspace)
    results: list[dict[str, Any]] = []
    spreads: dict[str, tuple[float, float]] = {}   # op -> (lowest, highest) held-out measured / predicted
    say = options.progress or (lambda _message: None)
    args = {"target": options.target, "ops": ops, "sources": sources, "seed": options.seed,
            "max_rows_per_gpu": options.max_rows_per_gpu, "lane_correction": options.lanes}

    kept: list[str] = []   # names whose earlier champion stays
    widened: list[str] = []   # ops priced with the lane correction
    correction: lane_attainment.LaneAttainment | None = None   # the one they carry
    target_lanes = float(sheet.cores_per_sm) if sheet.cores_per_sm else math.nan

    def register(record: VersionRecord, model: Model, split: dict[str, Any], started: float, test: str) -> None:
        record.fit_seconds = round(time.monotonic() - started, 3)
        version = registry.log_version(store, run.run_id, record, model, [], split)
        has_champion = store.scalar("SELECT count(*) FROM model_aliases WHERE name = ? AND alias = 'champion'",
                                    [record.name])
        promoted = options.promote or not has_champion
        if promoted:
            registry.set_champion(store, record.name, version)
        else:
            kept.append(record.name)
        results.append({"name": record.name, "version": version, "family": record.family, "op": record.op,
                        "pass": record.pass_, "test": test, "gmae": record.metrics.get("gmae"),
                        "n_train": record.n_train, "n_test": record.n_test,
                        "seconds": round(time.monotonic() - started, 1), "champion": promoted})

    command = f"pmdb fit cross-gpu --target {options.target}" + "".join(f" --op {o}" for o in options.ops or []) \
        + "".join(f" --source {g}" for g in sources) + ("" if options.lanes else " --no-lane-correction")
    with store.run("fit-cross-gpu", options.target, args) as run, \
            registry.parent_run(options.target, command, run.run_id):  # the versions' runs nest in one MLflow run
        for op in ops:
            started = time.monotonic()
            say(f"{op}: loading")
            data = load_data(store, op, sources + [options.target])
            own = data.gpu == options.target
            train = data.subset(np.flatnonzero(~own)).sample(options.max_rows_per_gpu, options.seed)
            say(f"{op}: fitting on {len(train)} rows of {', '.join(sorted(set(train.gpu)))}")
            model = fit(train, options.seed, lanes=options.lanes).for_gpu(sheet, options.target)
            if model.lane_factor(target_lanes) != 1.0:
                widened.append(op)
                correction = model.lanes
            if outside:
                model.info = {**model.info, "sheet_outside": outside}
            if own.any():
                test = data.subset(np.flatnonzero(own))
                predicted = model.predict(test.params)
                record_metrics = metrics.summary(predicted, test.times_us)
                histogram, how, n_test = error_histogram(predicted, test.times_us), "target's own rows", len(test)
                test_ids = test.measurement_id.astype(int).tolist()
            elif options.logo:
                say(f"{op}: leave-one-GPU-out over {len(set(train.gpu))} sources")
                held: dict[str, tuple[np.ndarray, np.ndarray]] = {}
                logo = leave_one_gpu_out(train, options.seed, predictions=held)
                model.info = {**model.info, "logo_ratio": logo_ratios(held)}
                if model.info["logo_ratio"]:
                    spreads[op] = (min(model.info["logo_ratio"].values()), max(model.info["logo_ratio"].values()))
                record_metrics = _pooled(logo)
                histogram, how, n_test = {}, "leave-one-GPU-out over the sources", int(record_metrics.get("n", 0))
                record_metrics["per_gpu_gmae"] = {g: m["gmae"] for g, m in logo.items()}
                test_ids = []
            else:
                record_metrics, histogram, how, n_test, test_ids = {}, {}, "none (--no-logo)", 0, []
            per_gpu = record_metrics.pop("per_gpu_gmae", None)
            model.info = {**model.info, "test": how, **({"logo_gmae": per_gpu} if per_gpu else {})}
            hashed = data_hash(pd.Series(train.measurement_id), train.params, train.times_us)
            split = {"test": how, "sources": sources, "id_column": "measurement_id",
                     "train_ids": train.measurement_id.astype(int).tolist(), "test_ids": test_ids,
                     **({"logo_gmae": per_gpu} if per_gpu else {}),
                     **({"logo_ratio": model.info["logo_ratio"]} if model.info.get("logo_ratio") else {})}
            record = VersionRecord(kernel_model_name(options.target, op, "fwd", "torch", data.dtype, "device"),
                                   options.target, op, "cross_gpu", pass_="fwd", implementation="torch",
                                   dtype=data.dtype, cache_state="device")
            record.seed, record.n_train, record.n_test = options.seed, len(train), n_test
            record.data_runs = sorted(set(train.run_id.tolist()))
            record.data_hash, record.metrics, record.histogram = hashed, record_metrics, histogram
            register(record, model, split, started, "own rows" if own.any() else how.split(" over")[0])
            if op in GEMM_BACKWARD_OPS and not _has_rows(store, options.target, op, "bwd"):
                backward = VersionRecord(kernel_model_name(options.target, op, "bwd", "torch", data.dtype, "device"),
                                         options.target, op, "gemm_shapes", pass_="bwd", implementation="torch",
                                         dtype=data.dtype, cache_state="device")
                backward.seed, backward.n_train, backward.data_runs = options.seed, len(train), record.data_runs
                backward.data_hash = hashed
                register(backward, gemm_shapes.GemmShapesModel(model, op, "bwd", "cross_gpu",
                                                               gemm_shapes.trained_bounds(train.params)),
                         {"test": "none: no backward timings (priced as the forward GEMMs of the cross-GPU model)",
                          "base": f"{record.name} (cross_gpu)", "id_column": "measurement_id"},
                         time.monotonic(), "none")
        if widened and correction is not None:
            notes.append(lane_note(widened, options.target, target_lanes, correction))
        if kept:
            notes.append(kept_note(kept, options.target))
        run.summary = {"versions": len(results), "sources": sources, "notes": notes}
    frame = pd.DataFrame(results)
    frame.attrs["sources"] = sources
    frame.attrs["logo_ratio_spread"] = spreads
    return frame, notes


def lane_note(ops: list[str], target: str, lanes: float, sample: lane_attainment.LaneAttainment) -> str:
    """One line for the ops whose price on ``target`` carries the lane correction."""
    return (f"{target}'s SMs have {lanes:.0f} FP32 lanes, its sources' {sample.source_lanes_per_sm}: "
            f"{', '.join(ops)} priced x{sample.factor(lanes):.2f}, what {sample.lanes_per_sm}-lane SMs took over "
            f"the same models' price ({sample.source})")


def kept_note(kept: list[str], target: str, shown: int = 2) -> str:
    """One line for the versions registered beside a champion their name already had (``kept``: model names)."""
    names = ", ".join(kept[:shown]) + (f" and {len(kept) - shown} more" if len(kept) > shown else "")
    return (f"{len(kept)} version(s) registered beside the champion their name already has ({names}), which "
            f"predictions keep using: `pmdb fit cross-gpu --target {target} --promote` makes a fit's versions the "
            f"champions, `pmdb models promote` one name at a time")


def sheet_outside(target: dict[str, float], sources: list[dict[str, float]]) -> dict[str, list[float]]:
    """The target sheet's figures (:data:`SPAN_FIGURES`) outside the span of its sources' sheets: {figure: [value,
    lowest, highest]} in the stored units (FLOP/s, bytes/s, counts, bytes). The trees see a GPU only through its
    kernels' tiles, waves and rooflines, so a sheet beyond its sources' is priced by what GPUs unlike it did: the
    L4's 104 FLOP per byte against the NeuSight GPUs' 12-30, its 128 FP32 lanes per SM against their 64. A figure
    missing from a sheet is not compared."""
    def figures(sheet: dict[str, float]) -> dict[str, float]:
        out = {k: float(v) for k, v in sheet.items() if v is not None and math.isfinite(float(v)) and float(v) > 0}
        if "fp32_flops" in out and "mem_bw" in out:
            out["flop_per_byte"] = out["fp32_flops"] / out["mem_bw"]
        return out

    own, theirs = figures(target), [figures(s) for s in sources]
    outside: dict[str, list[float]] = {}
    for name, *_ in SPAN_FIGURES:
        values = [s[name] for s in theirs if name in s]
        if name in own and values and not min(values) <= own[name] <= max(values):
            outside[name] = [own[name], min(values), max(values)]
    return outside


def describe_outside(outside: dict[str, list[float]]) -> str:
    """'FP32 per byte 104 FLOP/B (sources 12-30), ...' of :func:`sheet_outside`'s figures."""
    parts = []
    for name, label, unit, divisor in SPAN_FIGURES:
        if name in outside:
            value, low, high = (v / divisor for v in outside[name])
            span = f"{low:.3g}" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g}-{high:.3g}"
            parts.append(f"{label} {value:.3g}{' ' + unit if unit else ''} (sources {span})")
    return ", ".join(parts)


def logo_ratios(held: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Per held-out GPU, its kernels' measured time summed over what the model trained without it predicted for them
    ({gpu: sum measured / sum predicted}; > 1: that GPU ran slower than predicted). A step is a sum of kernels, so
    this is how far a step's cross-GPU priced work would have been off on that GPU (large kernels weigh most)."""
    return {gpu: float(np.sum(measured) / np.sum(predicted)) for gpu, (predicted, measured) in sorted(held.items())
            if np.sum(predicted) > 0 and np.isfinite(np.sum(measured) / np.sum(predicted))}


def _has_rows(store: Store, platform: str, op: str, pass_: str) -> bool:
    return bool(store.scalar("SELECT count(*) FROM v_op_measurements WHERE platform = ? AND op = ? AND pass = ?",
                             [platform, op, pass_]))


def _pooled(per_gpu: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of per-GPU metrics (each held-out GPU counts once), with the total row count."""
    if not per_gpu:
        return {}
    keys = [k for k in next(iter(per_gpu.values())) if k != "n"]
    out = {}
    for key in keys:
        values = [m[key] for m in per_gpu.values() if m.get(key) is not None and math.isfinite(m[key])]
        out[key] = float(np.mean(values)) if values else math.nan
    out["n"] = int(sum(m.get("n", 0) for m in per_gpu.values()))
    return out
