"""Reuse distances of the tensors an op reads, from an execution trace (bytes).

A kernel microbenchmark times an op warm (its operands cached) or cold (flushed); inside a training step each
operand is somewhere in between, decided by how much other data the step touched since that operand was last used:
its **reuse distance** (the LRU stack distance in bytes). Here, per ET op, each distinct input storage gets
``(distance, size)``: the bytes of the distinct storages accessed between its previous access and this op, and its
own bytes. The simulator turns them into a warm share with the target's cache capacity
(:func:`warm_share`).

* **Accesses** are made by the ET's leaf CPU ops (an op with CPU-op children accesses through them), reading their
  inputs and writing their outputs; views and allocations touch no data (``opmap.VIEW_OPS``). A storage's size is
  the largest view of it seen (numel x itemsize).
* **Steady state**: an iteration runs after another like it, so the op sequence is replayed twice and distances are
  taken from the second pass: a weight first read in the forward pass was last touched by the previous iteration's
  optimizer. A storage never touched before (in either pass) has an infinite distance (cold).
* Distances are queried at the start of each op (a parent op: before its first child's accesses).

Needs the tensor sizes (``input_tensors`` entries with numel and itemsize); entries without sizes count 0 bytes.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import pandas as pd

from pmdb.traces.opmap import COPY_OPS, VIEW_OPS

STORAGE, NUMEL, ITEMSIZE = 2, 4, 5   # positions in a stored tensor entry [arg, tensor_id, storage_id, offset, ...]
Reuse = tuple[tuple[float, float], ...]  # per distinct input storage: (distance bytes, storage bytes)


def _touches_data(name: str) -> bool:
    short = name.split("::", 1)[1] if "::" in name else name
    return not (short in VIEW_OPS and short not in COPY_OPS)


class _Fenwick:
    """Prefix sums over access positions (bytes at the position of each storage's latest access)."""

    def __init__(self, n: int):
        self.tree = np.zeros(n + 1)

    def add(self, i: int, value: float) -> None:
        i += 1
        while i < len(self.tree):
            self.tree[i] += value
            i += i & -i

    def prefix(self, i: int) -> float:
        """Sum of positions 0..i-1."""
        total = 0.0
        while i > 0:
            total += self.tree[i]
            i -= i & -i
        return total


def _storages(entries: Any) -> dict[int, float]:
    """storage id -> bytes (largest view) of a list of tensor entries."""
    out: dict[int, float] = {}
    for t in entries if isinstance(entries, list) else []:
        if len(t) <= STORAGE or t[STORAGE] is None:
            continue
        size = float((t[NUMEL] or 0) * (t[ITEMSIZE] or 0)) if len(t) > ITEMSIZE else 0.0
        storage = int(t[STORAGE])
        out[storage] = max(out.get(storage, 0.0), size)
    return out


def reuse_distances(ops: pd.DataFrame) -> dict[int, Reuse]:
    """ET op id -> ``((distance, bytes), ...)`` of its distinct input storages, for the CPU ops of ``ops`` (ET
    rows of one iteration: op_id, name, parent_id, category, input_tensors, output_tensors)."""
    cpu = ops[ops["category"] == "cpu_op"]
    if cpu.empty:
        return {}
    ids = cpu["op_id"].astype(int).tolist()
    parents = {int(p) for p in cpu["parent_id"].dropna().astype(int)}
    inputs = [_storages(v) for v in cpu["input_tensors"]]
    outputs = [_storages(v) for v in cpu["output_tensors"]]
    touches = [op_id not in parents and _touches_data(str(name)) for op_id, name in zip(ids, cpu["name"])]
    sizes: dict[int, float] = {}
    for per in inputs + outputs:
        for storage, size in per.items():
            sizes[storage] = max(sizes.get(storage, 0.0), size)
    accesses = sum(len(i) + len(o) for i, o, t in zip(inputs, outputs, touches) if t)
    tree = _Fenwick(2 * accesses + 1)
    latest: dict[int, int] = {}
    clock = 0
    out: dict[int, Reuse] = {}
    for second in (False, True):
        for op_id, ins, outs, touch in zip(ids, inputs, outputs, touches):
            if second and ins:
                total = tree.prefix(clock)
                out[op_id] = tuple((total - tree.prefix(latest[s] + 1) if s in latest else math.inf, sizes[s])
                                   for s in sorted(ins))
            if not touch:
                continue
            for storage in list(ins) + [s for s in outs if s not in ins]:
                if storage in latest:
                    tree.add(latest[storage], -sizes[storage])
                tree.add(clock, sizes[storage])
                latest[storage] = clock
                clock += 1
    return out


def cached_bytes(distance: float, size: float, capacity_bytes: float) -> float:
    """Bytes of a storage still in an LRU cache of ``capacity_bytes`` after ``distance`` bytes of other data:
    ``clip(capacity - distance, 0, size)``."""
    return min(max(capacity_bytes - distance, 0.0), size)


def warm_share(reuse: Reuse | Sequence[Sequence[float]], capacity_bytes: float) -> float:
    """Share of an op's input bytes still cached under LRU with ``capacity_bytes`` (NaN when the op has no sized
    inputs, or no capacity)."""
    total = sum(size for _, size in reuse)
    if not total or not capacity_bytes or capacity_bytes <= 0:
        return math.nan
    return sum(cached_bytes(distance, size, capacity_bytes) for distance, size in reuse) / total
