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
from typing import Any

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
    return [pd.DataFrame({"B": b, "M": m, "N": k, "K": n}), pd.DataFrame({"B": b, "M": k if op == "bmm" else n,
                                                                          "N": n if op == "bmm" else k, "K": m})]


def price(base: Model, op: str, pass_: str, params: pd.DataFrame) -> np.ndarray:
    """µs of each row: the forward model ``base`` summed over the op's GEMMs in one batched call."""
    parts = shapes(op, pass_, params)
    frame = pd.concat(parts, ignore_index=True)
    if GEMM_ALIASES[op] == "fully_connected":
        frame = frame.drop(columns=["B"])  # fully_connected models were fitted with B constant (1)
    times = np.asarray(base.predict(frame), dtype=float)
    return times.reshape(len(parts), len(params)).sum(axis=0)


class GemmShapesModel(Model):
    """A forward GEMM model applied to the GEMMs of ``op`` in ``pass_`` (see the module docstring)."""

    family = "gemm_shapes"

    def __init__(self, base: Model, op: str, pass_: str, base_family: str | None = None):
        self.base, self.op, self.pass_ = base, op, pass_
        self.base_family = base_family or base.family

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return price(self.base, self.op, self.pass_, frame)

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "pass": self.pass_, "base_family": self.base_family,
                "features": {"inputs": "B, M, N, K (pmdb GEMM parameters)", "gemms": "fitters.gemm_shapes",
                             "base": self.base.features()}}

    def save_weights(self, directory: Path) -> None:
        self.base.save(Path(directory) / BASE_DIR)

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "GemmShapesModel":
        return cls(load_dir(Path(directory) / BASE_DIR), config["op"], config["pass"], config["base_family"])
