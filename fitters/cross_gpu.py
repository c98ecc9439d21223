"""The cross-GPU kernel family: one model per op over every GPU with kernel tables, whose features include the GPU's
spec sheet, so it prices a GPU known only by its specs (after NeuSight, Lee et al., ASPLOS'25: predict the
utilisation a kernel attains, bounded by the roofline, instead of its latency).

For each row (µs, FLOP, bytes):

1. the kernel is cut into tiles the way GPU libraries do (GEMM, conv as implicit GEMM: 128 x 128 output tiles with the
   whole reduction; row ops: one row per block; element-wise: 512 elements per 128-thread block), the tiles run in
   waves of (SMs x resident tiles per SM);
2. the wave roofline: t_roof = waves x max(tile FLOP / (peak FP32 / SMs), tile bytes / (bandwidth / SMs)), never
   below the whole-kernel roofline max(FLOP / peak, bytes / bandwidth);
3. a gradient-boosted regressor predicts ln(t / t_roof) = -ln(utilisation) from the op's sizes, its work, the tile
   and wave counts and the GPU's specs (ln peak FP32, ln bandwidth, SMs, cores per SM, clock, L2, ridge point);
4. t = t_roof / u with u clipped to (0, u_max], u_max the largest utilisation seen in training (1 when the
   roofline holds; a little above where a working set that fits in L2 beats DRAM bandwidth).

GEMM-shaped ops in the backward pass are priced as their forward GEMMs (:mod:`fitters.gemm_shapes`). Every GPU
taking part needs a spec sheet (``pmdb platform-specs``); rows are the GPUs' device timings (cache state ``device``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import skops.io as sio
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from collectors import gpu_specs
from fitters import features as feats, gemm_shapes, opcost
from fitters.model import Model
from fitters.split import split_rows
from pmdb import metrics
from pmdb.errors import PmdbError
from pmdb.store import Store

SPEC_FEATURES = ("fp32_flops", "mem_bw", "sm_count", "cores_per_sm", "clock_mhz", "l2_bytes")
GEMM_TILE = 128             # output tile side (elements) of GEMMs and implicit-GEMM convolutions
VECTOR_BLOCK = 512          # elements per block of element-wise kernels (128 threads x 4)
RESIDENT_BLOCKS = 4         # tiles resident per SM at once (a nominal occupancy)
ROW_OPS = frozenset({"softmax", "layer_norm", "log_softmax", "batch_norm"})
CONV_OPS = frozenset({"conv2d"})
WEIGHTS_FILE = "model.skops"
TRUSTED_TYPES = {"sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
                 "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
                 "sklearn._loss.loss.HalfSquaredError", "sklearn._loss.loss.AbsoluteError",
                 "sklearn._loss.link.IdentityLink", "sklearn._loss.link.Interval"}
HYPER = {"loss": "squared_error", "learning_rate": 0.08, "max_leaf_nodes": 63, "l2_regularization": 1.0,
         "max_iter": 600, "min_samples_leaf": 10}


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
    return b, m, n, k


def work_frame(op: str, pass_: str, dtype: str, params: pd.DataFrame, specs: pd.DataFrame) -> pd.DataFrame:
    """Per-row work, tiles, waves and rooflines (µs) of ``op`` on the GPUs of ``specs`` (aligned rows)."""
    flops, moved = opcost.work(op, pass_, params.astype(float), dtype)
    it = float(opcost.ITEMSIZE.get(dtype, 4))
    peak, bw, sms = (specs[c].to_numpy(dtype=float) for c in ("fp32_flops", "mem_bw", "sm_count"))
    if op in gemm_shapes.GEMM_ALIASES or op in CONV_OPS:
        b, m, n, k = _gemm_dims(op, params)
        tiles = b * np.ceil(m / GEMM_TILE) * np.ceil(n / GEMM_TILE)
        tile_m, tile_n = np.minimum(m, GEMM_TILE), np.minimum(n, GEMM_TILE)
        tile_flops = 2 * tile_m * tile_n * k
        tile_bytes = it * (tile_m * k + k * tile_n + tile_m * tile_n)
        resident = np.ones(len(params))
    elif op in ROW_OPS:
        cols = _col(params, "N")
        tiles = np.maximum(flops, 1) * 0 + opcost.numel(params) / np.maximum(cols, 1)
        tile_flops, tile_bytes = flops / np.maximum(tiles, 1), moved / np.maximum(tiles, 1)
        resident = np.full(len(params), 4.0 * RESIDENT_BLOCKS)
    else:
        tiles = np.ceil(opcost.numel(params) / VECTOR_BLOCK)
        tile_flops, tile_bytes = flops / np.maximum(tiles, 1), moved / np.maximum(tiles, 1)
        resident = np.full(len(params), float(RESIDENT_BLOCKS))
    slots = sms * resident
    waves = np.ceil(np.maximum(tiles, 1) / slots)
    per_sm = np.maximum(tile_flops * resident / (peak / sms), tile_bytes * resident / (bw / sms))
    wave_roof = waves * per_sm * 1e6
    kernel_roof = np.maximum(flops / peak, moved / bw) * 1e6
    roof = np.maximum(np.maximum(wave_roof, kernel_roof), 1e-3)
    return pd.DataFrame({"flops": flops, "bytes": moved, "tiles": tiles, "waves": waves,
                         "fill": np.maximum(tiles, 1) / (waves * slots), "kernel_roof_us": kernel_roof,
                         "roof_us": roof})


def _matrix(op: str, pass_: str, dtype: str, params: pd.DataFrame, specs: pd.DataFrame,
            param_names: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(feature matrix, roofline µs) of each row."""
    work = work_frame(op, pass_, dtype, params, specs)
    columns = [np.log(np.maximum(_col(params, p), 1e-9)) for p in param_names]
    intensity = work["flops"].to_numpy() / np.maximum(work["bytes"].to_numpy(), 1.0)
    ridge = specs["fp32_flops"].to_numpy(dtype=float) / specs["mem_bw"].to_numpy(dtype=float)
    columns += [np.log1p(work[c].to_numpy()) for c in ("flops", "bytes", "tiles", "waves")]
    columns += [work["fill"].to_numpy(), np.log(work["roof_us"].to_numpy()),
                np.log(np.maximum(work["kernel_roof_us"].to_numpy(), 1e-3)), np.log1p(intensity),
                np.log1p(intensity) - np.log(ridge),
                np.log1p(work["bytes"].to_numpy()) - np.log(specs["l2_bytes"].fillna(4 * 2 ** 20).to_numpy(float))]
    for name in SPEC_FEATURES:
        values = specs[name].to_numpy(dtype=float)
        columns.append(np.log(np.where(np.isfinite(values) & (values > 0), values, np.nan)))
    columns.append(np.log(ridge))
    return np.column_stack(columns), work["roof_us"].to_numpy()


def _feature_names(param_names: tuple[str, ...]) -> list[str]:
    return ([f"ln_{p}" for p in param_names] + ["ln_flops", "ln_bytes", "ln_tiles", "ln_waves", "wave_fill",
                                                 "ln_roof_us", "ln_kernel_roof_us", "ln_intensity",
                                                 "ln_intensity_over_ridge", "ln_bytes_over_l2"]
            + [f"ln_{s}" for s in SPEC_FEATURES] + ["ln_ridge"])


class CrossGpuModel(Model):
    """Utilisation model of one op over GPUs; ``predict`` takes the op's parameter columns and prices them on the GPU
    whose specs the model is bound to (``for_gpu``) or on per-row spec columns (``SPEC_FEATURES``)."""

    family = "cross_gpu"

    def __init__(self, op: str, dtype: str, param_names: tuple[str, ...], estimator: HistGradientBoostingRegressor,
                 max_util: float, gpus: list[str], target: dict[str, Any] | None = None,
                 info: dict[str, Any] | None = None):
        self.op, self.dtype, self.param_names = op, dtype, tuple(param_names)
        self.estimator, self.max_util, self.gpus = estimator, float(max_util), list(gpus)
        self.target, self.info = target, info or {}

    def for_gpu(self, sheet: gpu_specs.GpuSheet, name: str) -> "CrossGpuModel":
        """The same model bound to one GPU's specs (what a registered version of a platform holds)."""
        target = {"platform": name, **{k: v for k, v in sheet.features().items()}, "device": sheet.device}
        return CrossGpuModel(self.op, self.dtype, self.param_names, self.estimator, self.max_util, self.gpus,
                             target, self.info)

    def _specs(self, frame: pd.DataFrame) -> pd.DataFrame:
        if all(c in frame.columns for c in SPEC_FEATURES):
            return frame[list(SPEC_FEATURES)].astype(float).reset_index(drop=True)
        if self.target is None:
            raise PmdbError(f"the cross-GPU {self.op} model is bound to no GPU: give spec columns "
                            f"{', '.join(SPEC_FEATURES)}")
        return pd.DataFrame({c: np.full(len(frame), float(self.target[c])) for c in SPEC_FEATURES})

    def predict_pass(self, frame: pd.DataFrame, pass_: str = "fwd") -> np.ndarray:
        """µs of each row in ``pass_``; GEMM-shaped backward passes as the sum of their forward GEMMs."""
        frame = frame.reset_index(drop=True)
        specs = self._specs(frame)
        frame = frame.drop(columns=[c for c in SPEC_FEATURES if c in frame.columns])
        if pass_ != "fwd" and self.op in gemm_shapes.GEMM_ALIASES:
            parts = gemm_shapes.shapes(self.op, pass_, frame)
            return sum(self._predict_fwd(part, specs) for part in parts)
        return self._predict_fwd(frame, specs)

    def _predict_fwd(self, params: pd.DataFrame, specs: pd.DataFrame) -> np.ndarray:
        x, roof = _matrix(self.op, "fwd", self.dtype, params, specs, self.param_names)
        with threadpool_limits(1):
            log_slowdown = self.estimator.predict(x)
        utilisation = np.clip(np.exp(-log_slowdown), 1e-6, self.max_util)
        return roof / utilisation

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return self.predict_pass(frame, "fwd")

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "dtype": self.dtype, "params": list(self.param_names), "max_util": self.max_util,
                "gpus": self.gpus, "target": self.target, "hyper": HYPER, "info": self.info,
                "features": {"names": _feature_names(self.param_names), "target": "ln(t / wave roofline)",
                             "specs": list(SPEC_FEATURES), "op": self.op}}

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
                   config["max_util"], config["gpus"], config.get("target"), config.get("info"))


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

    def subset(self, rows: np.ndarray) -> "CrossGpuData":
        return CrossGpuData(self.op, self.dtype, self.params.iloc[rows].reset_index(drop=True), self.times_us[rows],
                            self.gpu[rows], self.config_key[rows], self.specs.iloc[rows].reset_index(drop=True),
                            self.measurement_id[rows], self.run_id[rows])


def gpus_with_tables(store: Store) -> pd.DataFrame:
    """Platforms with specs and forward device timings: platform, op, rows."""
    return store.query("SELECT m.platform, m.op, count(*) AS rows FROM v_op_measurements m "
                       "JOIN gpu_specs s ON s.platform = m.platform WHERE m.cache_state = 'device' "
                       "AND m.pass = 'fwd' AND s.fp32_flops IS NOT NULL AND s.mem_bw IS NOT NULL "
                       "GROUP BY ALL ORDER BY m.platform, m.op")


def load_data(store: Store, op: str, platforms: list[str] | None = None, dtype: str = "float32") -> CrossGpuData:
    """Rows of ``op`` (forward, device timings, ``dtype``) on ``platforms`` (default: every GPU with specs)."""
    sql = ("SELECT m.measurement_id, m.run_id, m.platform, m.config_key, CAST(m.params AS VARCHAR) AS params, "
           f"m.median_us, {', '.join('s.' + c for c in SPEC_FEATURES)} FROM v_op_measurements m "
           "JOIN gpu_specs s ON s.platform = m.platform WHERE m.op = ? AND m.pass = 'fwd' AND m.dtype = ? "
           "AND m.cache_state = 'device' AND s.fp32_flops IS NOT NULL AND s.mem_bw IS NOT NULL")
    args: list[Any] = [op, dtype]
    if platforms:
        sql += f" AND m.platform IN ({', '.join('?' * len(platforms))})"
        args += platforms
    frame = store.query(sql + " ORDER BY m.measurement_id", args)
    frame = frame[np.isfinite(frame["median_us"].to_numpy(dtype=float)) & (frame["median_us"] > 0)]
    frame = frame.reset_index(drop=True)
    params = feats.params_frame(frame["params"]) if len(frame) else pd.DataFrame()
    specs = frame[list(SPEC_FEATURES)].astype(float)
    if specs["sm_count"].isna().any():
        raise PmdbError(f"{op}: a GPU's spec sheet lacks Num_Sm (needed for the wave roofline)")
    return CrossGpuData(op, dtype, params, frame["median_us"].to_numpy(dtype=float), frame["platform"].to_numpy(),
                        frame["config_key"].to_numpy(), specs, frame["measurement_id"].to_numpy(),
                        frame["run_id"].to_numpy())


def fit(data: CrossGpuData, seed: int = 0, hyper: dict[str, Any] | None = None) -> CrossGpuModel:
    """Fit one op's utilisation model on ``data`` (every GPU in it); deterministic for a seed."""
    if len(data.times_us) < 10:
        raise PmdbError(f"{data.op}: {len(data.times_us)} rows on GPUs with specs: too few to fit")
    names = tuple(sorted(c for c in data.params.columns if data.params[c].nunique() > 1 and (data.params[c] > 0).all()))
    x, roof = _matrix(data.op, "fwd", data.dtype, data.params, data.specs, names)
    y = np.log(data.times_us / roof)
    settings = {**HYPER, **(hyper or {})}
    estimator = HistGradientBoostingRegressor(random_state=seed, early_stopping=False, **settings)
    with threadpool_limits(1):
        estimator.fit(x, y)
    max_util = float(max(1.0, np.quantile(np.exp(-y), 0.999)))
    return CrossGpuModel(data.op, data.dtype, names, estimator, max_util, sorted(set(data.gpu)),
                         info={"rows": int(len(y)), "seed": seed})


def held_out(data: CrossGpuData, seed: int = 0) -> dict[str, Any]:
    """Seeded 80/20 split by (GPU, configuration): fit on the training side of every GPU, score each GPU's test side.
    Returns {'per_gpu': {gpu: metrics}, 'all': metrics}."""
    split = split_rows(pd.Series(data.gpu).astype(str) + "/" + pd.Series(data.config_key).astype(str), seed)
    model = fit(data.subset(split.train), seed)
    test = data.subset(split.test)
    predicted = model.predict(pd.concat([test.params, test.specs], axis=1))
    out = {"per_gpu": {}, "all": metrics.summary(predicted, test.times_us)}
    for gpu in sorted(set(test.gpu)):
        rows = test.gpu == gpu
        out["per_gpu"][gpu] = metrics.summary(predicted[rows], test.times_us[rows])
    return out


def leave_one_gpu_out(data: CrossGpuData, seed: int = 0) -> dict[str, dict[str, float]]:
    """Train on every GPU but one, test on all rows of that one: {held-out gpu: metrics}."""
    out = {}
    for gpu in sorted(set(data.gpu)):
        train = np.flatnonzero(data.gpu != gpu)
        if len(set(data.gpu[train])) < 2:
            continue
        model = fit(data.subset(train), seed)
        test = data.subset(np.flatnonzero(data.gpu == gpu))
        out[gpu] = metrics.summary(model.predict(pd.concat([test.params, test.specs], axis=1)), test.times_us)
    return out


# ---- registering versions for a GPU known only by its specs -------------------------------------------------------
@dataclass
class CrossGpuOptions:
    """What `pmdb fit cross-gpu` asked for."""

    target: str                       # platform to register versions for (needs specs)
    ops: list[str] | None = None      # None = every op with tables on at least two GPUs
    sources: list[str] | None = None  # GPUs to train on (default: every GPU with specs and tables, minus the target)
    seed: int = 0
    progress: bool = False


def fit_for_target(store: Store, workspace: Any, options: CrossGpuOptions) -> tuple[pd.DataFrame, list[str]]:
    """Fit one cross-GPU model per op on the source GPUs and register it on the target platform, bound to its specs.
    Test metrics: the target's own rows when it has tables (never trained on), else the leave-one-GPU-out GMAE
    over the sources (a GPU the model never saw, as the target is). Returns (one row per version, notes)."""
    from fitters.evaluate import data_hash, error_histogram
    from fitters.registry import Registry, VersionRecord, choose_champion, kernel_model_name

    sheet = gpu_specs.load(store, options.target)
    if sheet is None or sheet.fp32_flops is None or sheet.mem_bw is None or sheet.sm_count is None:
        raise PmdbError(f"platform {options.target!r} has no spec sheet with FP32 rate, bandwidth and SMs: register "
                        f"one with `pmdb platform-specs FILE --name {options.target}`")
    tables = gpus_with_tables(store)
    sources = [g for g in (options.sources or sorted(set(tables["platform"]))) if g != options.target]
    unknown = [g for g in sources if g not in set(tables["platform"])]
    if unknown:
        raise PmdbError(f"no spec sheet or no device timings for source GPU(s) {', '.join(unknown)} "
                        f"(GPUs with both: {', '.join(sorted(set(tables['platform']))) or 'none'})")
    per_op = tables[tables["platform"].isin(sources)].groupby("op")["platform"].nunique()
    ops = options.ops or sorted(per_op[per_op >= 2].index)
    missing = [o for o in ops if per_op.get(o, 0) < 2]
    if missing:
        raise PmdbError(f"too few source GPUs with tables of {', '.join(missing)} (need 2; sources: "
                        f"{', '.join(sources) or 'none'})")
    if not ops:
        raise PmdbError("no op has tables on two or more GPUs with spec sheets: import tables (`pmdb collect "
                        "import-ops`) and register their GPUs' sheets (`pmdb platform-specs`)")
    registry = Registry(workspace)
    results, notes = [], []
    args = {"target": options.target, "ops": ops, "sources": sources, "seed": options.seed}
    with store.run("fit-cross-gpu", options.target, args) as run:
        for op in ops:
            started = time.monotonic()
            data = load_data(store, op, sources + [options.target])
            own = data.gpu == options.target
            train = data.subset(np.flatnonzero(~own))
            model = fit(train, options.seed).for_gpu(sheet, options.target)
            if own.any():
                test = data.subset(np.flatnonzero(own))
                predicted = model.predict(test.params)
                record_metrics = metrics.summary(predicted, test.times_us)
                histogram = error_histogram(predicted, test.times_us)
                how, n_test = "target's own rows", int(own.sum())
            else:
                logo = leave_one_gpu_out(train, options.seed)
                record_metrics = _pooled(logo)
                histogram, how, n_test = {}, "leave-one-GPU-out over the sources", int(record_metrics.get("n", 0))
            record = VersionRecord(kernel_model_name(options.target, op, "fwd", "torch", data.dtype, "device"),
                                   options.target, op, "cross_gpu", pass_="fwd", implementation="torch",
                                   dtype=data.dtype, cache_state="device")
            record.seed, record.n_train, record.n_test = options.seed, len(train.times_us), n_test
            record.data_runs = sorted(set(train.run_id.tolist()))
            record.data_hash = data_hash(pd.Series(train.measurement_id), train.params, train.times_us)
            record.metrics, record.histogram = record_metrics, histogram
            record.fit_seconds = round(time.monotonic() - started, 3)
            model.info = {**model.info, "test": how}
            version = registry.log_version(store, run.run_id, record, model, [],
                                           {"test": how, "sources": sources, "id_column": "measurement_id"})
            champion = choose_champion(store, record.name)
            if champion is not None:
                registry.set_champion(store, record.name, champion)
            results.append({"name": record.name, "version": version, "family": "cross_gpu", "op": op,
                            "test": "own rows" if own.any() else "LOGO", "gmae": record_metrics.get("gmae"),
                            "n_train": record.n_train, "n_test": n_test,
                            "seconds": round(time.monotonic() - started, 1)})
        run.summary = {"versions": len(results), "sources": sources}
    return pd.DataFrame(results), notes


def _pooled(per_gpu: dict[str, dict[str, float]]) -> dict[str, float]:
    """Mean of per-GPU metrics (each held-out GPU counts once), with the total row count."""
    if not per_gpu:
        return {}
    keys = [k for k in next(iter(per_gpu.values())) if k != "n"]
    out = {k: float(np.mean([m[k] for m in per_gpu.values() if m.get(k) is not None and math.isfinite(m[k])]))
           for k in keys}
    out["n"] = int(sum(m.get("n", 0) for m in per_gpu.values()))
    return out
