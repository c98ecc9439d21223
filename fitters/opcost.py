"""Work estimates of an op from its stored parameters: floating-point operations and bytes moved (method.md section 3).

Used by the roofline family (time = max(flops / peak FLOP/s, bytes / peak bandwidth)) and as two derived features
(ln flops, ln bytes) of the learned families. Parameters are looked up by name (``B``, ``M``, ``N``, ``K``, ...);
an op this table does not know is treated as element-wise over the product of its size parameters.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import pandas as pd

from pmdb.traces.state_values import ZERO_SHARE

# Bytes per element of the dtypes the collectors record.
ITEMSIZE = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
            "int64": 8, "int32": 4, "int8": 1, "uint8": 1}

# Parameters that are not sizes (never multiplied into an element count).
NOT_SIZES = frozenset({"stride", "dilation", "groups", "diag", "is_depthwise", "p", "pad", "padding", "offset",
                       "dim", "axis", "inplace", "bias", "transposed", "alpha", "beta", "eps", "momentum",
                       ZERO_SHARE})

# Per-element (flops, memory accesses) of element-wise and memory ops, forward and backward (method.md section 3).
ELEMENTWISE: dict[str, dict[str, tuple[float, float]]] = {
    "relu": {"fwd": (1, 2), "bwd": (1, 3)},
    "sigmoid": {"fwd": (4, 2), "bwd": (2, 2)},
    "gelu": {"fwd": (175, 2), "bwd": (255, 2)},
    "tanh": {"fwd": (180, 2), "bwd": (260, 2)},
    "pow": {"fwd": (180, 2), "bwd": (180, 3)},
    "softmax": {"fwd": (174, 2), "bwd": (2, 4)},
    "add": {"fwd": (1, 3), "bwd": (1, 3)}, "sub": {"fwd": (1, 3), "bwd": (1, 3)},
    "mul": {"fwd": (1, 3), "bwd": (1, 3)}, "div": {"fwd": (1, 3), "bwd": (1, 3)},
    # a tensor with a scalar (pmdb.traces.opmap.SCALAR_OPERAND): one tensor read, one written
    "add_scalar": {"fwd": (1, 2), "bwd": (1, 2)}, "mul_scalar": {"fwd": (1, 2), "bwd": (1, 2)},
    "sum": {"fwd": (1, 1), "bwd": (0, 2)},
    "binary_cross_entropy": {"fwd": (7, 3), "bwd": (4, 3)}, "bce": {"fwd": (7, 3), "bwd": (4, 3)},
    "dropout": {"fwd": (2, 3), "bwd": (2, 3)},
    "layer_norm": {"fwd": (5, 2), "bwd": (8, 4)}, "batch_norm": {"fwd": (5, 2), "bwd": (8, 4)},
    "copy": {"fwd": (0, 2), "bwd": (0, 2)}, "copy_": {"fwd": (0, 2), "bwd": (0, 2)},
    "contiguous": {"fwd": (0, 2), "bwd": (0, 2)}, "clone": {"fwd": (0, 2), "bwd": (0, 2)},
    "zero_": {"fwd": (0, 1), "bwd": (0, 1)}, "transpose": {"fwd": (0, 2), "bwd": (0, 2)},
    "tril": {"fwd": (0, 2), "bwd": (0, 2)}, "concat": {"fwd": (0, 2), "bwd": (0, 2)},
    "cat": {"fwd": (0, 2), "bwd": (0, 2)},
    # the optimizer's ops (forward only; in place: x is read and written, scalars are not memory accesses)
    "sqrt": {"fwd": (1, 2), "bwd": (2, 3)}, "sqrt_": {"fwd": (1, 2), "bwd": (2, 3)},
    "add_": {"fwd": (1, 3), "bwd": (1, 3)}, "mul_": {"fwd": (1, 2), "bwd": (1, 2)},
    "div_": {"fwd": (1, 2), "bwd": (1, 2)}, "lerp_": {"fwd": (3, 3), "bwd": (3, 3)},
    "addcmul_": {"fwd": (3, 4), "bwd": (3, 4)}, "addcdiv_": {"fwd": (3, 4), "bwd": (3, 4)},
    "fill_": {"fwd": (0, 1), "bwd": (0, 1)},
}
GEMM_OPS = frozenset({"fully_connected", "linear", "addmm", "mm", "matmul", "bmm", "gemm", "baddbmm"})
DEFAULT_ELEMENTWISE = (1.0, 2.0)
# glibc's mmap threshold under pmdb's allocator settings (collectors/workloads/allocator.py): with mmap on (a user's
# MALLOC_MMAP_MAX_; pmdb's default turns it off, and the roofline's fresh-page cost then fits ~0) an output at least
# this big is mapped fresh, page-faulted in by the op and unmapped when released.
MMAP_THRESHOLD_BYTES = 32 * 2 ** 20


def _col(params: pd.DataFrame, name: str, default: float = 1.0) -> np.ndarray:
    if name in params.columns:
        return params[name].fillna(default).to_numpy(dtype=float)
    return np.full(len(params), default)


def numel(params: pd.DataFrame) -> np.ndarray:
    """Product of the size parameters of each row (at least 1)."""
    sizes = [c for c in params.columns if c not in NOT_SIZES]
    out = np.ones(len(params))
    for column in sizes:
        out *= np.maximum(params[column].fillna(1).to_numpy(dtype=float), 1.0)
    return out


def _gemm(params: pd.DataFrame, it: float, pass_: str) -> tuple[np.ndarray, np.ndarray]:
    b, m, n, k = (_col(params, c) for c in ("B", "M", "N", "K"))
    scale = 2.0 if pass_ == "bwd" else 1.0  # backward computes two products (input and weight gradients)
    return scale * 2 * b * m * n * k, scale * it * b * (m * k + k * n + m * n)


def _conv2d(params: pd.DataFrame, it: float, pass_: str) -> tuple[np.ndarray, np.ndarray]:
    b, h, ic, oc = (_col(params, c) for c in ("B", "H", "IC", "OC"))
    stride, dilation = _col(params, "stride"), _col(params, "dilation")
    fh, fw = _col(params, "FH"), _col(params, "FW")
    groups = np.where(_col(params, "is_depthwise", 0.0) > 0, ic, _col(params, "groups"))
    oh = np.maximum(np.floor((h - dilation * (fh - 1) - 1) / stride) + 1, 1)
    ow = np.maximum(np.floor((h - dilation * (fw - 1) - 1) / stride) + 1, 1)
    scale = 2.0 if pass_ == "bwd" else 1.0
    flops = scale * 2 * b * oc * oh * ow * (ic / groups) * fh * fw
    data = scale * it * (b * ic * h * h + oc * (ic / groups) * fh * fw + b * oc * oh * ow)
    return flops, data


def _conv1d(params: pd.DataFrame, it: float, pass_: str) -> tuple[np.ndarray, np.ndarray]:
    b, length, ic, oc, groups = (_col(params, c) for c in ("B", "L", "IC", "OC", "groups"))
    scale = 2.0 if pass_ == "bwd" else 1.0
    return scale * 2 * b * length * ic * oc / groups, scale * it * (b * length * (ic + oc) + ic * oc / groups)


def _embedding(params: pd.DataFrame, it: float, pass_: str) -> tuple[np.ndarray, np.ndarray]:
    b, pooling, dim, tables = (_col(params, c) for c in ("B", "L", "D", "T"))
    lookups = b * pooling * tables
    scale = 2.0 if pass_ == "bwd" else 1.0  # backward reads gradients and writes the rows back
    return scale * lookups * dim, scale * (it * lookups * dim + 8 * lookups)


def _dense_embedding(params: pd.DataFrame, it: float, pass_: str) -> tuple[np.ndarray, np.ndarray]:
    """Forward gathers N rows of D (read, write) and reads N int64 indices; backward also zeroes the dense [V, D]
    gradient and adds the N gradient rows into it (read the gradient row, read and write the table row)."""
    v, d, n = (_col(params, c) for c in ("V", "D", "N"))
    if pass_ == "bwd":
        return n * d, it * (v * d + 3 * n * d) + 8 * n
    return np.zeros(len(params)), it * 2 * n * d + 8 * n


SPECIAL: dict[str, Callable[[pd.DataFrame, float, str], tuple[np.ndarray, np.ndarray]]] = {
    **{op: _gemm for op in GEMM_OPS}, "conv2d": _conv2d, "conv1d": _conv1d, "embedding_lookup": _embedding,
    "embedding": _dense_embedding,
}


def work(op: str, pass_: str, params: pd.DataFrame, dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    """(flops, bytes) of each row of ``params`` (one column per parameter name) for ``op`` in ``pass_``."""
    it = float(ITEMSIZE.get(dtype, 4))
    if op in SPECIAL:
        return SPECIAL[op](params, it, pass_)
    flops_per, accesses_per = ELEMENTWISE.get(op, {}).get(pass_, DEFAULT_ELEMENTWISE)
    count = numel(params)
    return flops_per * count, accesses_per * it * count


def zero_mib(params: pd.DataFrame, dtype: str = "float32") -> np.ndarray:
    """MiB of exact zeros each row's input holds (its zero share Z times its size; 0 without Z)."""
    return _col(params, ZERO_SHARE, 0.0) * float(ITEMSIZE.get(dtype, 4)) * numel(params) / 2 ** 20


def fresh_bytes(op: str, pass_: str, params: pd.DataFrame, dtype: str = "float32") -> np.ndarray:
    """Bytes of each row's output when an element-wise op allocates it above the mmap threshold, else 0: the
    page-fault cost per byte (~0.7 ms per MiB measured here) that the bandwidth term does not hold. In-place ops
    (names ending in '_') allocate nothing; ops outside the element-wise table are not estimated (0)."""
    if op.endswith("_") or op in SPECIAL or op not in ELEMENTWISE:
        return np.zeros(len(params))
    out = float(ITEMSIZE.get(dtype, 4)) * numel(params)
    return np.where(out >= MMAP_THRESHOLD_BYTES, out, 0.0)


def known_ops() -> Mapping[str, str]:
    """Op name -> how its work is estimated (for documentation and the CLI)."""
    out = {op: "special" for op in SPECIAL}
    out.update({op: "elementwise" for op in ELEMENTWISE if op not in out})
    return out
