"""A list of steps prepared once for timing many times (a calibration fit prices the same runs hundreds of times).

The plain ops (every :class:`~planner.costs.Op` without SUMMA panel collectives) are stacked into arrays with one
row per op, in step order, and one column per unique candidate key (or none where every field is a scalar), with
the parts of the wave-quantised GEMM time that depend on neither the system nor a calibration already worked out.
The collectives and the panel ops stay a list, in step order; given the candidates, the collectives of a block
without panel ops are also stacked (:class:`Collectives`: one row per collective, one column per candidate, with
their group sizes, ring volumes and steps). :meth:`planner.timing.Timer.block` times the rows with one numpy
expression each and sums them in step order, so the result is bit-for-bit what timing step by step gives.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from planner.candidates import Candidates
from planner.costs import Comm, Op, Step
from planner.network import RING

TILE = 128   # GEMM output tile (elements per side) of the wave quantisation (planner.timing)


@dataclass
class Collectives:
    """Collectives (rows, in step order) over candidates (columns), as :func:`planner.network.collective_time`
    prices them: ``kinds``; buffers ``nbytes`` (bytes); group size ``n`` and its GPUs inside one NVLink domain
    ``fast`` (as given, and as floats ``n_f``, ``fast_f`` at most n); ring ``volume`` (bytes) and ``steps``;
    ``inside`` one domain; ``active`` (n > 1); ``p2p`` rows; ``count`` (calls per row, a column); the ring
    evaluations each row counts as usage; ``extras``: whether a fitted calibration's fixed and per-step costs
    apply (:meth:`planner.timing.Timer.comm_time`; not for the tied-embedding all-reduce)."""

    kinds: list[str]
    nbytes: np.ndarray
    n: np.ndarray
    fast: np.ndarray
    n_f: np.ndarray
    fast_f: np.ndarray
    volume: np.ndarray
    steps: np.ndarray
    inside: np.ndarray
    active: np.ndarray
    p2p: np.ndarray
    count: np.ndarray
    ring_counts: list[int]
    extras: bool = True


def collectives(kinds: list[str], nbytes: list[np.ndarray], groups: list[tuple[np.ndarray, np.ndarray]],
                counts: list[float] | None = None, extras: bool = True) -> Collectives:
    """Collectives of ``kinds`` with their full buffers ``nbytes`` (bytes per candidate) and ``groups`` (group
    size, GPUs inside one NVLink domain per candidate) stacked; the arithmetic is ring_time's, element by
    element."""
    rows = []
    for kind, size, (n, fast) in zip(kinds, nbytes, groups):
        n = np.broadcast_to(np.asarray(n), np.shape(size) or np.shape(n))
        size = np.broadcast_to(np.asarray(size, dtype=float), n.shape)
        fast = np.broadcast_to(np.asarray(fast), n.shape)
        n_f = np.asarray(n, dtype=float)
        fast_f = np.minimum(np.asarray(fast, dtype=float), n_f)
        factor, ring_steps = RING[kind]
        rows.append((size, n, fast, n_f, fast_f, factor(n_f) * size, np.broadcast_to(ring_steps(n_f), n.shape)))
    # one row: views, no copy (a search prices ~1e5 candidates once)
    size, n, fast, n_f, fast_f, volume, steps = (rows[0][i][None] if len(rows) == 1 else np.stack([r[i] for r in rows])
                                                 for i in range(7))
    active = n > 1
    return Collectives(list(kinds), size, n, fast, n_f, fast_f, volume, steps, fast_f >= n_f, active,
                       np.array([[k == "p2p"] for k in kinds]),
                       np.array([[float(c)] for c in (counts or [1.0] * len(kinds))]),
                       [int(a.sum()) for a in active], extras)


@dataclass
class Stacked:
    """Steps of one block. ``special``: collectives and panel ops in step order; ``gemm_at``: how many of them
    precede the first plain GEMM (None: no plain GEMM). Arrays are (ops × columns): HBM bytes, FLOPs and kernel
    launches of every plain op; for the GEMM rows (``gemm_rows``) the 128×128 output tiles of one launch's batch,
    the FLOPs of one tile of depth K, the exact FLOPs of one launch and the launches. ``gemm_count``: GEMM
    evaluations the roofline answers (what op-by-op timing counts as usage)."""

    steps: list[Step]
    special: list[Step]
    gemm_at: int | None
    nbytes: np.ndarray
    launches: np.ndarray
    vector_rows: np.ndarray
    vector_flops: np.ndarray
    flash_rows: np.ndarray
    flash_flops: np.ndarray
    gemm_rows: np.ndarray
    tiles: np.ndarray
    tile_flops: np.ndarray
    gemm_flops: np.ndarray
    gemm_launches: np.ndarray
    gemm_count: int
    comms: Collectives | None = None

    @property
    def has_plain(self) -> bool:
        return len(self.nbytes) > 0


def _floats(values: list, shape: tuple[int, ...]) -> np.ndarray:
    """Values (scalars or arrays) broadcast to ``shape`` and stacked: (len(values), *shape) float64 (each row
    converted as ``np.asarray(value, dtype=float)`` converts it)."""
    out = np.empty((len(values), *shape))
    for i, value in enumerate(values):
        out[i] = value
    return out


def stack(steps: list[Step], cands: Candidates | None = None, inv: np.ndarray | None = None) -> Stacked:
    """``steps`` prepared for :meth:`planner.timing.Timer.block`; given the candidates and their map to the op
    arrays' unique keys (``inv``), the collectives too where no op has panel collectives (worth it where the
    block is timed many times: the stacked arrays are copies over all candidates)."""
    plain: list[Op] = [s for s in steps if not is_special(s)]   # type: ignore[misc]
    special = [s for s in steps if is_special(s)]
    gemm_at = None
    for i, step in enumerate(steps):
        if not is_special(step) and step.kind == "gemm":
            gemm_at = sum(1 for s in steps[:i] if is_special(s))
            break
    shapes = {np.shape(x) for op in plain for x in (op.nbytes, op.flops, op.launches, *(op.dims or ()))}
    shape = np.broadcast_shapes(*shapes) if shapes else ()
    kinds = np.array([op.kind for op in plain], dtype=object)
    gemm_rows = np.flatnonzero(kinds == "gemm")
    flash_rows = np.flatnonzero(kinds == "flash")
    vector_rows = np.flatnonzero((kinds != "gemm") & (kinds != "flash"))
    gemms = [plain[i] for i in gemm_rows]
    M, N, K, count = _floats([x for op in gemms for x in op.dims], shape).reshape(len(gemms), 4, *shape
                                                                                  ).swapaxes(0, 1)
    flops, launches = _floats([op.flops for op in plain], shape), _floats([op.launches for op in plain], shape)
    return Stacked(
        steps=list(steps), special=special, gemm_at=gemm_at,
        nbytes=_floats([op.nbytes for op in plain], shape), launches=launches,
        vector_rows=vector_rows, vector_flops=flops[vector_rows],
        flash_rows=flash_rows, flash_flops=flops[flash_rows],
        gemm_rows=gemm_rows,
        tiles=np.ceil(M / TILE) * np.ceil(N / TILE) * count,
        tile_flops=2.0 * TILE * TILE * K,
        gemm_flops=2.0 * M * N * K * count,
        gemm_launches=launches[gemm_rows],
        gemm_count=sum(math.prod(np.broadcast_shapes(*(np.shape(x) for x in (*op.dims, op.launches))))
                       for op in gemms),
        comms=_block_collectives(special, cands, inv))


def _block_collectives(special: list[Step], cands: Candidates | None, inv: np.ndarray | None
                       ) -> Collectives | None:
    if cands is None or inv is None or not special or not all(isinstance(s, Comm) for s in special):
        return None
    n = len(inv)
    comms: list[Comm] = special   # type: ignore[assignment]
    nbytes = [np.broadcast_to(np.asarray(c.nbytes, dtype=float), (n,)) if np.ndim(c.nbytes) == 0
              else np.asarray(c.nbytes, dtype=float)[inv] for c in comms]
    return collectives([c.kind for c in comms], nbytes, [cands.group(c.dim) for c in comms],
                       [c.count for c in comms])


def is_special(step: Step) -> bool:
    """A step timed one by one: a collective, or an op with SUMMA panel collectives."""
    return isinstance(step, Comm) or bool(step.panel_comms)


_BY_CANDIDATE = ("nbytes", "n", "fast", "n_f", "fast_f", "volume", "steps", "inside", "active")
_BY_KEY = ("nbytes", "launches", "vector_flops", "flash_flops", "tiles", "tile_flops", "gemm_flops", "gemm_launches")


def concat_collectives(parts: list[Collectives]) -> Collectives:
    """The same collectives (rows) over the candidates of each part, one after the other (columns)."""
    first = parts[0]
    return dataclasses.replace(first, **{f: np.concatenate([getattr(p, f) for p in parts], axis=1)
                                         for f in _BY_CANDIDATE},
                               ring_counts=[sum(r) for r in zip(*(p.ring_counts for p in parts))])


def concat_stacked(parts: list[Stacked], keys: list[int]) -> Stacked:
    """The same steps stacked over the unique keys of each part (``keys`` of them; a part whose fields are all
    scalars repeated over its keys), one after the other; their collectives over their candidates likewise."""
    def columns(part: Stacked, name: str, k: int) -> np.ndarray:
        value = getattr(part, name)
        return np.broadcast_to(value if value.ndim == 2 else value[:, None], (len(value), k))

    first = parts[0]
    return dataclasses.replace(
        first, **{f: np.concatenate([columns(p, f, k) for p, k in zip(parts, keys)], axis=1) for f in _BY_KEY},
        gemm_count=sum(p.gemm_count for p in parts),
        comms=None if first.comms is None else concat_collectives([p.comms for p in parts]))

