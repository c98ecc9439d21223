"""Time of a list of steps: a roofline per op (+ per-kernel overhead), ring collectives, SUMMA panel overlap.

GEMMs on tensor cores use wave quantisation: a GEMM of M×N outputs is cut into 128×128 tiles; the SMs run them in
waves, so its compute time is waves × (time of one tile of depth K on one SM at the achieved per-SM rate), plus a
fitted per-launch latency when a planner calibration gives one (planner/fitting.py; every collective then also pays
its fitted fixed latency). This makes
small or oddly shaped GEMMs slower than FLOPs / peak without a fitted model. A calibrated GEMM model, when given,
replaces the roofline wherever it returns a number. Results are ``Parts``: seconds per breakdown key.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from planner.candidates import Candidates, Framework
from planner.costs import Comm, Op, Step
from planner.network import CollectiveModel, collective_time, count_usage, ring_seconds
from planner.stacked import TILE, Collectives, Stacked, stack
from planner.system import System

Parts = dict[str, np.ndarray]


class GemmModel(Protocol):
    def gemm_time(self, M: np.ndarray, N: np.ndarray, K: np.ndarray, count: np.ndarray) -> np.ndarray: ...


def add(*parts: Parts) -> Parts:
    out: Parts = {}
    for p in parts:
        for key, value in p.items():
            out[key] = out[key] + value if key in out else value
    return out


def scale(parts: Parts, factor: np.ndarray | float) -> Parts:
    return {key: value * factor for key, value in parts.items()}


def total(parts: Parts) -> np.ndarray:
    return sum(parts.values(), 0.0)


def pick(mask: np.ndarray, a: Parts, b: Parts) -> Parts:
    """Element-wise choice between two Parts (a where mask)."""
    keys = set(a) | set(b)
    return {k: np.where(mask, a.get(k, 0.0), b.get(k, 0.0)) for k in keys}


class Timer:
    """Times steps for one system and framework; counts which source timed each GEMM and collective."""

    def __init__(self, system: System, fw: Framework, calibration: object | None = None):
        self.system = system
        self.fw = fw
        eff = system.efficiency
        self.matrix_rate = system.matrix_flops(fw.dtype) * eff["matrix"]
        self.flash_rate = system.matrix_flops(fw.dtype) * eff["flash_attention"]
        self.vector_rate = system.vector_flops(fw.dtype) * eff["vector"]
        self.hbm_rate = system.hbm_bw * eff["hbm"]
        self.overhead = system.op_overhead_us * 1e-6
        # additive terms of a fitted planner calibration (planner/fitting.py); 0 without one
        self.gemm_latency = float(getattr(calibration, "gemm_latency_s", 0.0))
        self.collective_latency = float(getattr(calibration, "collective_latency_s", 0.0))
        self.collective_fixed = float(getattr(calibration, "collective_fixed_s", 0.0))
        self.wave_weight = float(getattr(calibration, "wave_weight", 1.0))
        self.gemm_model: GemmModel | None = calibration if hasattr(calibration, "gemm_time") else None
        self.comm_model: CollectiveModel | None = calibration if hasattr(calibration, "collective_time") else None
        self.usage: dict[str, dict[str, int]] = {}

    # ---- one op ---------------------------------------------------------------------------------------------
    def op_time(self, op: Op) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(compute-bound time, memory-bound time, overhead) of an op, each 0 where the other bound wins."""
        memory = np.asarray(op.nbytes, dtype=float) / self.hbm_rate
        if op.kind == "gemm":
            compute = self._gemm_time(op)
        elif op.kind == "flash":
            compute = np.asarray(op.flops, dtype=float) / self.flash_rate
        else:
            compute = np.asarray(op.flops, dtype=float) / self.vector_rate
        compute, memory = np.broadcast_arrays(compute, memory)
        bound = compute >= memory
        overhead = np.broadcast_to(np.asarray(op.launches, dtype=float) * self.overhead, compute.shape)
        return np.where(bound, compute, 0.0), np.where(bound, 0.0, memory), overhead

    def _gemm_time(self, op: Op) -> np.ndarray:
        M, N, K, count = (np.asarray(x, dtype=float) for x in op.dims)
        M, N, K, count, launches = np.broadcast_arrays(M, N, K, count, np.asarray(op.launches, dtype=float))
        time = self.roofline_gemm(np.ceil(M / TILE) * np.ceil(N / TILE) * count, 2.0 * TILE * TILE * K,
                                  2.0 * M * N * K * count, launches)
        if self.gemm_model is not None:
            fitted = np.asarray(self.gemm_model.gemm_time(M, N, K, count), dtype=float) * launches
            ok = np.isfinite(fitted)
            time = np.where(ok, fitted, time)
            counts = self.usage.setdefault("gemm", {})
            counts["calibrated"] = counts.get("calibrated", 0) + int(ok.sum())
            counts["roofline"] = counts.get("roofline", 0) + int((~ok).sum())
        else:
            self._count_roofline_gemms(int(time.size))
        return time

    def roofline_gemm(self, tiles: np.ndarray, tile_flops: np.ndarray, flops: np.ndarray, launches: np.ndarray
                      ) -> np.ndarray:
        """Seconds of GEMM launches of ``tiles`` 128×128 output tiles of ``tile_flops`` FLOPs each (``flops`` in
        all) on the wave-quantised roofline."""
        waves = np.ceil(tiles / self.system.sm_count)
        per_sm = self.matrix_rate / self.system.sm_count
        quantised = waves * tile_flops / per_sm
        if self.wave_weight != 1.0:   # fitted: only this share of the wave-quantisation loss is real
            exact = flops / self.matrix_rate
            quantised = exact + self.wave_weight * (quantised - exact)
        return launches * (quantised + self.gemm_latency)

    # ---- collectives ----------------------------------------------------------------------------------------
    def comm_time(self, comm: Comm, cands: Candidates, nbytes: np.ndarray) -> np.ndarray:
        """Seconds of one collective for every candidate (``nbytes`` already per candidate)."""
        n, fast = cands.group(comm.dim)
        return self._group_comm_time(comm.kind, comm.count, nbytes, n, fast)

    def _group_comm_time(self, kind: str, count: float, nbytes: np.ndarray, n: np.ndarray, fast: np.ndarray
                         ) -> np.ndarray:
        time = collective_time(kind, nbytes, n, fast, self.system, self.comm_model, self.usage)
        # fitted: a fixed cost per collective call (launch, NCCL setup), and per ring step inside one NVLink domain;
        # across domains the network latency (system file, or fitted on multi-node runs) prices every ring step
        inside = (np.minimum(fast, n) >= n) & (n > 1)
        extra = np.where(n > 1, self.collective_fixed, 0.0) + np.where(inside, self.collective_latency * (n - 1), 0.0)
        return count * (time + extra)

    def collectives_time(self, c: Collectives, count_usage: bool = True) -> np.ndarray:
        """Seconds of stacked collectives (:func:`planner.stacked.collectives`; rows) for every candidate
        (columns): what :meth:`comm_time` (or, without ``extras``, :func:`collective_time`) gives row by row.
        ``count_usage`` False: the caller counts each row's ring evaluations (:meth:`count_ring`); only without
        a calibrated collective model."""
        if self.comm_model is not None:   # a calibrated collective model answers row by row
            assert count_usage, "a calibrated collective model counts its own usage"
            if not c.extras:
                return np.stack([collective_time(k, c.nbytes[i], c.n[i], c.fast[i], self.system, self.comm_model,
                                                 self.usage) for i, k in enumerate(c.kinds)])
            return np.stack([self._group_comm_time(k, c.count[i, 0], c.nbytes[i], c.n[i], c.fast[i])
                             for i, k in enumerate(c.kinds)])
        time = ring_seconds(c.volume, c.steps, c.fast_f, c.inside, c.active, c.p2p, self.system)
        if count_usage:
            for kind, ring in zip(c.kinds, c.ring_counts):
                self.count_ring(kind, ring)
        if not c.extras:
            return time
        extra = (np.where(c.active, self.collective_fixed, 0.0)
                 + np.where(c.inside & c.active, self.collective_latency * (c.n - 1), 0.0))
        return c.count * (time + extra)

    def count_ring(self, kind: str, evaluations: int) -> None:
        """Usage of ``evaluations`` collectives of ``kind`` the ring formula priced (as collective_time counts)."""
        count_usage(self.usage, kind, 0, evaluations)

    # ---- a list of steps --------------------------------------------------------------------------------------
    def block(self, steps: list[Step] | Stacked, cands: Candidates, inv: np.ndarray) -> Parts:
        """Parts of ``steps`` (a list, or stacked once by :func:`planner.stacked.stack` to be timed often) for every
        candidate. Op arrays are over unique keys; ``inv`` maps candidates to them. The plain ops are timed as
        stacked arrays and summed in step order (the same sums as op by op); with a calibrated GEMM model, op by
        op."""
        stacked = steps if isinstance(steps, Stacked) else stack(steps)
        if self.gemm_model is not None:
            return self._block_by_op(stacked.steps, cands, inv)
        n = len(inv)
        parts: Parts = {}
        stacked_comms = stacked.comms is not None and self.comm_model is None
        comm_times = self.collectives_time(stacked.comms, count_usage=False) if stacked_comms else None
        for i, step in enumerate(stacked.special):
            if i == stacked.gemm_at:
                self._count_roofline_gemms(stacked.gemm_count)   # usage keys in step order, as op by op
            if isinstance(step, Comm):
                if comm_times is not None:
                    self.count_ring(step.kind, stacked.comms.ring_counts[i])
                    time = comm_times[i]
                else:
                    time = self.comm_time(step, cands, expand(step.nbytes, inv, n))
                parts = add(parts, {step.category: time})
                continue
            c, m, o = (expand(x, inv, n) for x in self.op_time(step))
            parts = add(parts, {"compute": c, "memory": m, "overhead": o,
                                "summa_comm": self._panel_exposed(step, c + m + o, cands, inv)})
        if stacked.gemm_at == len(stacked.special):
            self._count_roofline_gemms(stacked.gemm_count)
        if not stacked.has_plain:
            return add(parts, {k: expand(0.0, inv, n) for k in ("compute", "memory", "overhead")})
        unique = dict(zip(("compute", "memory", "overhead"), self._stacked_times(stacked)))
        return add(parts, {k: expand(v, inv, n) for k, v in unique.items()})

    def _count_roofline_gemms(self, count: int) -> None:
        counts = self.usage.setdefault("gemm", {})
        counts["roofline"] = counts.get("roofline", 0) + count

    def _stacked_times(self, s: Stacked) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(compute-bound, memory-bound, overhead) seconds of the stacked plain ops, each summed over the ops in
        step order (``np.add.accumulate`` adds row after row: the sums op-by-op timing makes)."""
        memory = s.nbytes / self.hbm_rate
        compute = np.empty_like(memory)
        compute[s.vector_rows] = s.vector_flops / self.vector_rate
        compute[s.flash_rows] = s.flash_flops / self.flash_rate
        if len(s.gemm_rows):
            compute[s.gemm_rows] = self.roofline_gemm(s.tiles, s.tile_flops, s.gemm_flops, s.gemm_launches)
        bound = compute >= memory
        overhead = s.launches * self.overhead
        return tuple(np.add.accumulate(x, axis=0)[-1]   # type: ignore[return-value]
                     for x in (np.where(bound, compute, 0.0), np.where(bound, 0.0, memory), overhead))

    def _block_by_op(self, steps: list[Step], cands: Candidates, inv: np.ndarray) -> Parts:
        """:meth:`block` op by op (a calibrated GEMM model answers each op's GEMMs)."""
        n = len(inv)
        compute = memory = overhead = 0.0
        parts: Parts = {}
        for step in steps:
            if isinstance(step, Comm):
                nbytes = expand(step.nbytes, inv, n)
                parts = add(parts, {step.category: self.comm_time(step, cands, nbytes)})
                continue
            c, m, o = self.op_time(step)
            if not step.panel_comms:
                compute, memory, overhead = compute + c, memory + m, overhead + o
                continue
            c, m, o = (expand(x, inv, n) for x in (c, m, o))
            parts = add(parts, {"compute": c, "memory": m, "overhead": o,
                                "summa_comm": self._panel_exposed(step, c + m + o, cands, inv)})
        unique = {"compute": compute, "memory": memory, "overhead": overhead}
        return add(parts, {k: expand(v, inv, n) for k, v in unique.items()})

    def _panel_exposed(self, op: Op, op_time: np.ndarray, cands: Candidates, inv: np.ndarray) -> np.ndarray:
        """Communication left exposed when panel k+1's broadcasts/reduces overlap panel k's GEMM: the first
        panel's transfer, then whatever each later step's transfer exceeds its GEMM."""
        panels = cands.panels.astype(float)
        step_comm = sum((self.comm_time(c, cands, expand(c.nbytes, inv, len(inv)) / panels) for c in op.panel_comms),
                        np.zeros(len(inv)))
        step_compute = op_time / panels
        return step_comm + (panels - 1) * np.maximum(0.0, step_comm - step_compute)


def expand(value: np.ndarray | float, inv: np.ndarray, n: int) -> np.ndarray:
    """Values over unique keys -> values over all candidates (scalars broadcast)."""
    value = np.asarray(value, dtype=float)
    return np.broadcast_to(value, (n,)) if value.ndim == 0 else value[inv]
