"""Calibrated mode: measured and fitted numbers of a platform in place of spec sheets and ideal formulas.

- :func:`platform_system` makes a System from a platform in the store: its measured peaks (``v_platform_peaks``:
  'gemm_flops' FLOP/s, 'mem_bw' bytes/s) replace the tensor/vector FLOP/s and HBM bandwidth (efficiencies 1: the
  peaks are achieved rates), its memory and device count the capacity and the fast domain; the rest (links,
  network, overheads) comes from a base system, and ``provenance`` says which field came from where.
- A calibration is any object with ``gemm_time(M, N, K, count)`` and/or ``collective_time(kind, nbytes, group)``
  returning seconds per element of numpy arrays, NaN where it has no answer (the planner then uses its roofline or
  ring formula there and counts which source timed what).
- :class:`MeasuredCollectives` interpolates a platform's measured collective curves (``v_collective_measurements``).
- :class:`FittedModels` wraps fitted models with the fitters' interface ``predict(frame) -> µs`` (a GEMM model over
  columns B, M, N, K; collective models over ``max_rank_bytes``, one per collective and world size);
  :func:`planner.registered.registered_models` builds one from a platform's registered (champion) models.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Protocol, runtime_checkable

import numpy as np
import pandas as pd

from collectors import gpu_specs
from pmdb.errors import PmdbError
from pmdb.store import Store
from planner.system import System

_TORCH_DTYPES = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "half": "fp16", "float": "fp32"}


@runtime_checkable
class Calibration(Protocol):
    """Seconds for GEMMs and collectives, vectorised over numpy arrays (NaN where not covered)."""

    label: str

    def gemm_time(self, M: np.ndarray, N: np.ndarray, K: np.ndarray, count: np.ndarray) -> np.ndarray: ...

    def collective_time(self, kind: str, nbytes: np.ndarray, group: np.ndarray) -> np.ndarray: ...


def platform_system(store: Store, platform: str, base: System) -> System:
    """A System from a platform's measured peaks (a spec-sheet GPU's nominal ones where none were measured); fields
    not measured come from ``base``."""
    row = store.query("SELECT device_kind, gpu_count, gpu_memory_bytes, memory_bytes FROM platforms WHERE name = ?",
                      [platform])
    if row.empty:
        raise PmdbError(f"unknown platform {platform!r}")
    peaks = store.query("SELECT metric, dtype, value FROM v_platform_peaks WHERE platform = ?", [platform])
    source = "measured"
    nominal = gpu_specs.peaks(store, platform)   # a GPU known by its spec sheet: nominal FP32 rate and bandwidth
    for metric in ("gemm_flops", "mem_bw"):
        if (peaks["metric"] == metric).any() or metric not in nominal:
            continue
        peaks = pd.concat([peaks, pd.DataFrame([{"metric": metric, "dtype": "float32", "value": nominal[metric]}])],
                          ignore_index=True)
        source = "measured or spec sheet"
    gemm = peaks[peaks["metric"] == "gemm_flops"]
    bandwidth = peaks[peaks["metric"] == "mem_bw"]
    if gemm.empty or bandwidth.empty:
        missing = "gemm_flops" if gemm.empty else "mem_bw"
        raise PmdbError(f"platform {platform!r} has no measured '{missing}' peak in a completed run and no spec "
                        f"sheet: measure its peaks first (the ops collector stores them) or register its sheet "
                        f"(`pmdb platform-specs`)")
    flops = {_TORCH_DTYPES.get(str(d), str(d)): float(v) / 1e12 for d, v in zip(gemm["dtype"], gemm["value"])}
    info = row.iloc[0]
    cuda = info["device_kind"] == "cuda"
    capacity = info["gpu_memory_bytes"] if cuda else info["memory_bytes"]
    domain = int(info["gpu_count"]) if cuda and pd.notna(info["gpu_count"]) else 1
    efficiency = dict(base.efficiency, matrix=1.0, vector=1.0, hbm=1.0, flash_attention=1.0)
    changes: dict[str, Any] = {
        "name": f"platform:{platform}", "matrix_tflops": flops, "vector_tflops": dict(flops),
        "hbm_gbps": float(bandwidth["value"].max()) / 1e9, "nvlink_domain": domain, "efficiency": efficiency,
        "description": f"measured peaks of platform {platform}; links and network from {base.name}",
    }
    if pd.notna(capacity):
        changes["hbm_gb"] = float(capacity) / 1e9
    provenance = {f: f"{source} ({platform})" for f in ("matrix_tflops", "vector_tflops", "hbm_gbps")}
    provenance["hbm_gb"] = f"platform row ({platform})" if pd.notna(capacity) else f"base system {base.name}"
    provenance["nvlink_domain"] = f"device count ({platform})"
    for name in ("nvlink_gbps", "nvlink_latency_us", "nic_gbps", "nics_per_gpu", "network_latency_us",
                 "op_overhead_us", "sm_count"):
        provenance[name] = f"base system {base.name}"
    return dataclasses.replace(base, provenance=provenance, **changes)


class MeasuredCollectives:
    """Collective time by log-log interpolation of a platform's measured curves (median latency against
    ``max_rank_bytes``, per collective and world size); NaN outside the measured sizes and world sizes."""

    def __init__(self, store: Store, platform: str):
        self.label = f"measured collectives of {platform}"
        frame = store.query("SELECT collective, world_size, max_rank_bytes, median(lat_p50_us) AS us "
                            "FROM v_collective_measurements WHERE platform = ? AND split_kind = 'equal' "
                            "AND rank IS NULL GROUP BY ALL ORDER BY ALL", [platform])
        self.curves: dict[tuple[str, int], tuple[np.ndarray, np.ndarray]] = {}
        for (kind, world), group in frame.groupby(["collective", "world_size"]):
            if len(group) >= 2:
                self.curves[(str(kind), int(world))] = (np.log(group["max_rank_bytes"].to_numpy(float)),
                                                        np.log(group["us"].to_numpy(float)))

    def __bool__(self) -> bool:
        return bool(self.curves)

    def collective_time(self, kind: str, nbytes: np.ndarray, group: np.ndarray) -> np.ndarray:
        nbytes, group = np.asarray(nbytes, dtype=float), np.asarray(group)
        out = np.full(nbytes.shape, np.nan)
        for world in np.unique(group):
            curve = self.curves.get((kind, int(world)))
            if curve is None:
                continue
            sizes, times = curve
            sel = group == world
            x = np.log(np.maximum(nbytes[sel], 1.0))
            inside = (x >= sizes[0]) & (x <= sizes[-1])
            out[np.flatnonzero(sel)[inside]] = np.exp(np.interp(x[inside], sizes, times)) * 1e-6
        return out


Predictor = Any   # an object with predict(frame: DataFrame) -> ndarray of µs (fitters.model.Model)


class FittedModels:
    """Fitted models as a calibration: ``gemm`` predicts from columns B, M, N, K; ``collectives`` maps
    (collective, world size) to a model predicting from ``max_rank_bytes`` (the full buffer in bytes)."""

    def __init__(self, gemm: Predictor | None = None,
                 collectives: Mapping[tuple[str, int], Predictor] | None = None, label: str = "fitted models"):
        self.gemm, self.collectives, self.label = gemm, dict(collectives or {}), label

    def gemm_time(self, M: np.ndarray, N: np.ndarray, K: np.ndarray, count: np.ndarray) -> np.ndarray:
        M, N, K, count = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (M, N, K, count)))
        if self.gemm is None:
            return np.full(M.shape, np.nan)
        frame = pd.DataFrame({"B": count.ravel(), "M": M.ravel(), "N": N.ravel(), "K": K.ravel()})
        return np.asarray(self.gemm.predict(frame), dtype=float).reshape(M.shape) * 1e-6

    def collective_time(self, kind: str, nbytes: np.ndarray, group: np.ndarray) -> np.ndarray:
        nbytes, group = np.asarray(nbytes, dtype=float), np.asarray(group)
        out = np.full(nbytes.shape, np.nan)
        for world in np.unique(group):
            model = self.collectives.get((kind, int(world)))
            if model is not None:
                sel = group == world
                out[sel] = np.asarray(model.predict(pd.DataFrame({"max_rank_bytes": nbytes[sel]})), dtype=float) * 1e-6
        return out


class Calibrations:
    """Several calibrations, asked in order: the first finite answer wins."""

    def __init__(self, *parts: object):
        self.parts = [p for p in parts if p]
        self.label = " + ".join(getattr(p, "label", type(p).__name__) for p in self.parts)

    def __getattr__(self, name: str) -> Any:
        """Terms of a fitted planner calibration (``*_latency_s``, ``*_fixed_s``, ``host_overlap``,
        ``wave_weight``, ``overlap_sharpness``) from the first part that has them."""
        if (name.endswith("_s") or name in ("host_overlap", "wave_weight", "overlap_sharpness")) and name != "parts":
            for part in self.__dict__.get("parts", []):
                if hasattr(part, name):
                    return getattr(part, name)
        raise AttributeError(name)

    def _ask(self, method: str, shape: tuple[int, ...], *args: Any) -> np.ndarray:
        out = np.full(shape, np.nan)
        for part in self.parts:
            if hasattr(part, method):
                got = np.asarray(getattr(part, method)(*args), dtype=float)
                out = np.where(np.isnan(out), got, out)
        return out

    def gemm_time(self, M: np.ndarray, N: np.ndarray, K: np.ndarray, count: np.ndarray) -> np.ndarray:
        return self._ask("gemm_time", np.broadcast(M, N, K, count).shape, M, N, K, count)

    def collective_time(self, kind: str, nbytes: np.ndarray, group: np.ndarray) -> np.ndarray:
        return self._ask("collective_time", np.shape(nbytes), kind, nbytes, group)
