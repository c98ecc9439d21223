"""What one op costs: FLOPs, HBM bytes, saved activation bytes, and the communication steps between ops.

Everything is a numpy array over candidate configurations (or a scalar that broadcasts). Sizes are bytes, counts
are per GPU. A layer is a list of steps (:class:`Op` or :class:`Comm`) in execution order.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import numpy as np

Array = Union[np.ndarray, float]

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "p2p")
GROUP_DIMS = ("t1", "t2", "pp", "dp", "dp_t2")


@dataclass
class Comm:
    """A collective over one parallel dimension's group. ``nbytes`` is the full buffer (the gathered or reduced
    tensor) in bytes; ``count`` repeats it (e.g. the three small all-reduces of a vocabulary-parallel loss)."""

    name: str
    kind: str          # one of COLLECTIVES
    category: str      # breakdown key: 'tp_comm', 'cp_comm', 'summa_comm', 'pp_comm', 'dp_comm'
    nbytes: Array
    dim: str           # one of GROUP_DIMS
    count: float = 1.0

    def __post_init__(self) -> None:
        assert self.kind in COLLECTIVES and self.dim in GROUP_DIMS, (self.kind, self.dim)


@dataclass
class Op:
    """One kernel (or ``launches`` identical kernels). kind: 'gemm' (tensor cores, roofline with wave quantisation
    or a calibrated GEMM model), 'vector' (element-wise) or 'flash' (fused attention on tensor cores)."""

    name: str
    kind: str
    flops: Array                 # total FLOPs of all launches
    nbytes: Array                # total HBM bytes read + written
    launches: Array = 1.0        # kernels launched (each pays the per-op overhead)
    saved: Array = 0.0           # bytes this forward op keeps for the backward pass
    attn_core: bool = False      # recomputed by selective recomputation
    dims: tuple[Array, Array, Array, Array] | None = None   # GEMM M, N, K, batch count of ONE launch
    panel_comms: list[Comm] = field(default_factory=list)   # SUMMA: broadcasts/reduces overlapped panel by panel


Step = Union[Op, Comm]


def gemm(name: str, M: Array, N: Array, K: Array, e: int, *, count: Array = 1, launches: Array = 1,
         saved: Array = 0.0, attn_core: bool = False, panel_comms: list[Comm] | None = None) -> Op:
    """A (batched) matrix multiply (M×K)·(K×N), ``count`` batches per launch, ``e`` bytes per element."""
    flops = 2.0 * M * N * K * count * launches
    nbytes = e * (M * K + K * N + M * N) * count * launches
    return Op(name, "gemm", flops, nbytes, launches=launches, saved=saved, attn_core=attn_core,
              dims=(M, N, K, count), panel_comms=list(panel_comms or []))


def vector(name: str, elements: Array, flops_per: float, bytes_per: float, *, launches: Array = 1,
           saved: Array = 0.0, attn_core: bool = False) -> Op:
    """An element-wise (memory-bound) kernel over ``elements`` with per-element FLOPs and bytes."""
    return Op(name, "vector", flops_per * elements, bytes_per * elements, launches=launches, saved=saved,
              attn_core=attn_core)


def flash(name: str, flops: Array, nbytes: Array, *, launches: Array = 1, saved: Array = 0.0) -> Op:
    """A fused attention kernel (no s×s matrix in HBM)."""
    return Op(name, "flash", flops, nbytes, launches=launches, saved=saved)


def matrix_flops(steps: list[Step]) -> Array:
    """Sum of GEMM and fused-attention FLOPs of a list of steps."""
    return sum((s.flops for s in steps if isinstance(s, Op) and s.kind in ("gemm", "flash")), 0.0)


def saved_bytes(steps: list[Step], *, attn_core: bool | None = None) -> Array:
    """Bytes the forward steps keep for backward (only attention-core ops, or only the others, when asked)."""
    return sum((s.saved for s in steps if isinstance(s, Op) and (attn_core is None or s.attn_core == attn_core)), 0.0)
