"""GEMM-shaped ops priced from their GEMM shapes: ``mm``, ``addmm``, ``matmul``, ``linear`` (pmdb's
``fully_connected``) and ``bmm``, forward and backward, as the sum of the forward GEMMs they run.

pmdb's GEMM parameters (``collectors/ops/gemm.py``): fully_connected X[M, K] · W[N, K]^T -> [M, N] (B = 1);
bmm X[B, M, K] · Y[B, K, N] -> [B, M, N]. The backward pass runs two GEMMs of the same work:

- fully_connected: dX[M, K] = dY[M, N] · W[N, K]  -> GEMM (M, N=K, K=N);  dW[N, K] = dY^T[N, M] · X[M, K] -> (M=N, N=K, K=M)
- bmm:             dX[B, M, K] = dY · Y^T          -> (B, M, N=K, K=N);     dY'[B, K, N] = X^T · dY -> (B, M=K, N=N, K=M)

(the bias gradient of fully_connected is a reduction over M: memory-bound and small, not priced here).
:class:`GemmShapesModel` wraps a fitted forward model of ``fully_connected`` or ``bmm`` and prices every GEMM-shaped
op and pass with it; a GPU whose tables hold only forward kernels (NeuSight) gets its backward GEMMs this way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import pandas as pd

from fitters.model import Model, load_dir

GEMM_ALIASES = {"fully_connected": "fully_connected", "linear": "fully_connected", "addmm": "fully_connected",
                "mm": "fully_connected", "matmul": "fully_connected", "gemm": "fully_connected", "bmm": "bmm",
                "baddbmm": "bmm"}
BASE_DIR = "base"


def _col(frame: pd.DataFrame, name: str) -> np.ndarray:
    return frame[name].to_numpy(dtype=float) if name in frame.columns else np.ones(len(frame))


def shapes(op: str, pass_: str, params: pd.DataFrame) -> list[pd.DataFrame]:
    """The forward GEMMs (frames with B, M, N, K; one row per input row) that ``op`` runs in ``pass_``."""
    if op not in GEMM_ALIASES:
        raise ValueError(f"{op} is not a GEMM-shaped op (known: {', '.join(GEMM_ALIASES)})")
    b, m, n, k = (_col(params, c) for c in ("B", "M", "N", "K"))
    if GEMM_ALIASES[op] == "fully_connected":
        m = m * b  # a batched linear input [B, M, K] is one GEMM of B·M rows
        b = np.ones(len(params))
    if pass_ == "fwd":
        return [pd.DataFrame({"B": b, "M": m, "N": n, "K": k})]
    if pass_ != "bwd":
        raise ValueError(f"unknown pass {pass_!r} (fwd or bwd)")
    input_grad = pd.DataFrame({"B": b, "M": m, "N": k, "K": n})
    if GEMM_ALIASES[op] == "bmm":   # dY[B, K, N] = X^T[B, K, M] · dZ[B, M, N]
        return [input_grad, pd.DataFrame({"B": b, "M": k, "N": n, "K": m})]
    return [input_grad, pd.DataFrame({"B": b, "M": n, "N": k, "K": m})]   # dW[N, K] = dY^T[N, M] · X[M, K]


def orient(gemm: pd.DataFrame, bounds: Mapping[str, float] | None) -> pd.DataFrame:
    """A GEMM's rows and columns swapped (C^T = B^T A^T: the same FLOPs and bytes) where M lies above the largest M
    the base model was trained on and N does not: a learned model does not extrapolate, and a backward GEMM's M is
    often a forward N (dW[N, K] of a 50k-word output layer has 50k rows; NeuSight's linear tables stop at 8192 rows
    but go to 65k columns). ``bounds``: {'M': max trained M, 'N': max trained N}; None leaves the GEMM as it is."""
    if not bounds or "M" not in bounds or "N" not in bounds:
        return gemm
    m, n = gemm["M"].to_numpy(dtype=float), gemm["N"].to_numpy(dtype=float)
    swap = (m > bounds["M"]) & (n <= bounds["N"]) & (n <= bounds["M"]) & (m <= bounds["N"])
    if not swap.any():
        return gemm
    out = gemm.copy()
    out["M"], out["N"] = np.where(swap, n, m), np.where(swap, m, n)
    return out


def chunk_rows(gemm: pd.DataFrame, max_rows: float | None) -> tuple[pd.DataFrame, np.ndarray]:
    """A GEMM whose rows M lie above ``max_rows`` (the largest M a model was trained on) as k = ceil(M / max_rows)
    GEMMs of ceil(M / k) rows each: (the GEMMs with M replaced by the chunk's rows, k per row). Its output tiles run
    in k times the waves of one chunk, so a GEMM 2x or 4x beyond the trained rows costs 2x or 4x a trained one
    instead of what a learned model extrapolates (flat, for trees). None or rows within: k = 1, unchanged."""
    count = np.ones(len(gemm))
    if not max_rows or max_rows <= 0 or "M" not in gemm.columns:
        return gemm, count
    m = gemm["M"].to_numpy(dtype=float)
    beyond = m > max_rows
    if not beyond.any():
        return gemm, count
    count[beyond] = np.ceil(m[beyond] / max_rows)
    out = gemm.copy()
    out["M"] = np.where(beyond, np.ceil(m / count), m)
    return out, count


def forward_bounds(op: str, pass_: str, params: pd.DataFrame) -> dict[str, float] | None:
    """The largest GEMM a forward model of ``op`` was trained on, for :func:`scaled_forward`: {'M': max rows (B·M
    for fully_connected), 'N': max columns, and for bmm 'B': max batch}; None for other ops and passes."""
    if op not in GEMM_ALIASES or pass_ != "fwd" or "M" not in params.columns or params.empty:
        return None
    m = pd.to_numeric(params["M"], errors="coerce").to_numpy(dtype=float)
    batch = pd.to_numeric(params["B"], errors="coerce").to_numpy(dtype=float) if "B" in params.columns else None
    out = {"M": float(np.nanmax(m))}
    if GEMM_ALIASES[op] == "fully_connected":
        if batch is not None:
            if np.unique(batch).size > 1:   # B is a feature of this model: rows are M alone
                return None
            out["M"] = float(np.nanmax(m * batch))
    elif batch is not None:
        out["B"] = float(np.nanmax(batch))
    if "N" in params.columns:
        out["N"] = float(pd.to_numeric(params["N"], errors="coerce").max())
    return out


def scaled_forward(predict: Callable[[pd.DataFrame], np.ndarray], op: str, frame: pd.DataFrame,
                   bounds: Mapping[str, float] | None) -> np.ndarray:
    """µs of each forward GEMM of ``frame`` by a learned forward model's ``predict``, scaled by waves beyond the rows
    it was trained on (``bounds`` from :func:`forward_bounds`): a batched linear [B, M, K] is one GEMM of B·M rows;
    a GEMM with more rows than trained is first :func:`orient`-ed (its transpose, when that fits), then run as
    k = ceil(M / max M) chunks of rows (:func:`chunk_rows`), and a bmm with more batches than trained as
    ceil(B / max B) batches of chunks: k times the time of one chunk, where trees and MLPs stay flat beyond their
    data. Rows within the bounds are priced as they are (a linear's batch folded into its rows)."""
    if not bounds or op not in GEMM_ALIASES or "M" not in frame.columns or frame.empty:
        return np.asarray(predict(frame), dtype=float)
    gemm = frame.reset_index(drop=True)
    if GEMM_ALIASES[op] == "fully_connected" and "B" in gemm.columns:
        batch = _col(gemm, "B")
        if (batch != 1).any():
            gemm = gemm.assign(M=_col(gemm, "M") * batch, B=1.0)
    m_bound = bounds.get("M")
    beyond = _col(gemm, "M") > (m_bound or np.inf)
    if "B" in bounds and "B" in gemm.columns:
        beyond |= _col(gemm, "B") > bounds["B"]
    if not beyond.any():
        return np.asarray(predict(gemm), dtype=float)
    gemm = orient(gemm, bounds) if "N" in gemm.columns else gemm
    gemm, count = chunk_rows(gemm, m_bound)
    if "B" in bounds and "B" in gemm.columns:
        batches = np.maximum(np.ceil(_col(gemm, "B") / bounds["B"]), 1.0)
        gemm = gemm.assign(B=np.ceil(_col(gemm, "B") / batches))
        count = count * batches
    return np.asarray(predict(gemm), dtype=float) * count


def price(base: Model, op: str, pass_: str, params: pd.DataFrame,
          bounds: Mapping[str, float] | None = None) -> np.ndarray:
    """µs of each row: the forward model ``base`` summed over the op's GEMMs in one batched call (each GEMM
    :func:`orient`-ed into the base's trained range when ``bounds`` are given, and rows still beyond it priced as
    :func:`chunk_rows`)."""
    parts, counts = [], []
    for part in shapes(op, pass_, params):
        chunked, count = chunk_rows(orient(part, bounds), (bounds or {}).get("M"))
        parts.append(chunked)
        counts.append(count)
    frame = pd.concat(parts, ignore_index=True)
    if GEMM_ALIASES[op] == "fully_connected":
        frame = frame.drop(columns=["B"])  # fully_connected models were fitted with B constant (1)
    times = np.asarray(base.predict(frame), dtype=float) * np.concatenate(counts)
    return times.reshape(len(parts), len(params)).sum(axis=0)


def trained_bounds(params: pd.DataFrame) -> dict[str, float]:
    """{'M': max, 'N': max} of a forward GEMM model's training parameters (for :func:`orient`)."""
    return {c: float(pd.to_numeric(params[c], errors="coerce").max()) for c in ("M", "N") if c in params.columns}


class GemmShapesModel(Model):
    """A forward GEMM model applied to the GEMMs of ``op`` in ``pass_`` (see the module docstring); ``bounds`` are
    the largest M and N the base was trained on (see :func:`orient`)."""

    family = "gemm_shapes"

    def __init__(self, base: Model, op: str, pass_: str, base_family: str | None = None,
                 bounds: Mapping[str, float] | None = None):
        self.base, self.op, self.pass_ = base, op, pass_
        self.base_family = base_family or base.family
        self.bounds = {k: float(v) for k, v in (bounds or {}).items()}

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return price(self.base, self.op, self.pass_, frame, self.bounds)

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "pass": self.pass_, "base_family": self.base_family, "bounds": self.bounds,
                "features": {"inputs": "B, M, N, K (pmdb GEMM parameters)", "gemms": "fitters.gemm_shapes",
                             "base": self.base.features()}}

    def save_weights(self, directory: Path) -> None:
        self.base.save(Path(directory) / BASE_DIR)

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "GemmShapesModel":
        return cls(load_dir(Path(directory) / BASE_DIR), config["op"], config["pass"], config["base_family"],
                   config.get("bounds"))
