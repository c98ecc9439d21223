"""Reuse distances of the tensors an op reads, from an execution trace (bytes).

A kernel microbenchmark times an op warm (its operands cached) or cold (flushed); inside a training step each
operand is somewhere in between, decided by how much other data the step touched since that operand was last used:
its **reuse distance** (the LRU stack distance in bytes). Here, per ET op, each distinct input storage gets
``(distance, size)``: the bytes of the distinct storages accessed between its previous access and this op, and its
own bytes. The simulator turns them into a warm share with the target's cache capacity
(:func:`warm_share`).

* **Accesses** are made by the CPU ops that touch data, reading their inputs and writing their outputs; views and
  allocations touch no data (``opmap.VIEW_OPS``). An op accesses the tensors of its own that no op below it
  accesses (``aten::linear`` none: its ``addmm`` reads them; an fbgemm kernel its tables, its children only
  allocating or copying an index): RULES_VERSION 12; before, an op with children accessed nothing. A storage's size is
  the largest view of it seen (numel x itemsize).
* **Steady state**: an iteration runs after another like it, so the op sequence is replayed twice and distances are
  taken from the second pass: a weight first read in the forward pass was last touched by the previous iteration's
  optimizer. A storage never touched before (in either pass) has an infinite distance (cold).
* Distances are queried at the start of each op (a parent op: before its first child's accesses). A parent op's
  inputs are its own and those its descendants read that were not written inside it (RULES_VERSION 12): an
  autograd node records only the gradient it is given, while its children read what the forward saved (the
  weights, the activations, an embedding lookup's tables), and the node is priced as one op.

* **Elapsed time** (RULES_VERSION 13): where the ops' traced times are given (the profiled trace's CPU ops linked to
  the ET), each entry also carries the µs since the storage was last accessed: from the end of the op that
  accessed it to the start of this one, a whole traced iteration added across the replay's wrap. ET ops without a
  linked time take the start of the op before them. Caches lose what a process touched as time goes by, apart from
  the bytes in between (:mod:`simulator.cache_decay`). Traced times carry the profiler's cost, so they run a little
  long.

Needs the tensor sizes (``input_tensors`` entries with numel and itemsize); entries without sizes count 0 bytes.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from pmdb.traces.opmap import COPY_OPS, VIEW_OPS

STORAGE, NUMEL, ITEMSIZE = 2, 4, 5   # positions in a stored tensor entry [arg, tensor_id, storage_id, offset, ...]
# per distinct input storage: (distance bytes, storage bytes), with (..., µs since its last access) where timed
Reuse = tuple[tuple[float, ...], ...]


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


def _op_times(ids: list[int], times: Mapping[int, tuple[float, float]] | None,
              period_us: float | None) -> tuple[list[float], list[float], float] | None:
    """Per op position: (starts, ends) in µs, an op without a time taking the start of the op before it, and the
    iteration's period (``period_us``, else the span of the times); None when fewer than two ops are timed."""
    if not times:
        return None
    known = [times.get(i) for i in ids]
    timed = [t for t in known if t is not None and t[0] == t[0] and t[1] == t[1]]
    if len(timed) < 2:
        return None
    first = next(t for t in known if t is not None and t[0] == t[0])[0]
    starts, ends, now = [], [], first
    for t in known:
        if t is not None and t[0] == t[0] and t[1] == t[1]:
            now = float(t[0])
            starts.append(now)
            ends.append(max(float(t[1]), now))
        else:
            starts.append(now)
            ends.append(now)
    span = max(ends) - min(starts)
    period = float(period_us) if period_us is not None and period_us == period_us and period_us >= span else span
    return starts, ends, period


def reuse_distances(ops: pd.DataFrame, times: Mapping[int, tuple[float, float]] | None = None,
                    period_us: float | None = None) -> dict[int, Reuse]:
    """ET op id -> ``((distance, bytes[, elapsed µs]), ...)`` of its distinct input storages, for the CPU ops of
    ``ops`` (ET rows of one iteration: op_id, name, parent_id, category, input_tensors, output_tensors).
    ``times``: ET op id -> its traced (start, end) µs, and ``period_us`` the traced iteration's length: with them
    each entry also says how long ago the storage was last accessed (inf: never)."""
    cpu = ops[ops["category"] == "cpu_op"]
    if cpu.empty:
        return {}
    ids = cpu["op_id"].astype(int).tolist()
    clocks = _op_times(ids, times, period_us)
    inputs = [_storages(v) for v in cpu["input_tensors"]]
    outputs = [_storages(v) for v in cpu["output_tensors"]]
    own, inputs, ending = _accesses(ids, cpu["parent_id"].tolist(), cpu["name"].tolist(), inputs, outputs)
    sizes: dict[int, float] = {}
    for per in inputs + outputs:
        for storage, size in per.items():
            sizes[storage] = max(sizes.get(storage, 0.0), size)
    tree = _Fenwick(2 * sum(len(a) for a in own) + 1)
    latest: dict[int, int] = {}
    touched_at: dict[int, float] = {}    # µs of each storage's latest access (with times)
    clock = 0
    out: dict[int, Reuse] = {}
    for second in (False, True):
        shift = clocks[2] if clocks is not None and second else 0.0
        for k, (op_id, ins) in enumerate(zip(ids, inputs)):
            if second and ins:
                total = tree.prefix(clock)
                entries = []
                for s in sorted(ins):
                    entry: tuple[float, ...] = (total - tree.prefix(latest[s] + 1) if s in latest else math.inf,
                                                sizes[s])
                    if clocks is not None:
                        since = clocks[0][k] + shift - touched_at[s] if s in touched_at else math.inf
                        entry += (max(since, 0.0),)
                    entries.append(entry)
                out[op_id] = tuple(entries)
            for j in ending.get(k, ()):   # an op's own accesses follow the ops below it (and end with it)
                for storage in own[j]:
                    if storage in latest:
                        tree.add(latest[storage], -sizes[storage])
                    tree.add(clock, sizes[storage])
                    latest[storage] = clock
                    if clocks is not None:
                        touched_at[storage] = clocks[1][j] + shift
                    clock += 1
    return out


def _accesses(ids: list[int], parent_ids: list[Any], names: list[Any], inputs: list[dict[int, float]],
              outputs: list[dict[int, float]]
              ) -> tuple[list[list[int]], list[dict[int, float]], dict[int, list[int]]]:
    """Per op (in the ops' order): the storages it accesses itself (its inputs, then its outputs, that no op below
    it accesses; none for a view or an allocation), and its input storages (storage id -> bytes): its own plus those
    the ops below it read before anything inside it wrote them; and position -> the ops (innermost first) whose
    own accesses come right after the op at that position, the last below them (or themselves)."""
    index = {op_id: k for k, op_id in enumerate(ids)}
    children: dict[int, list[int]] = {}
    for k, parent in enumerate(parent_ids):   # a parent comes before its children (any other link is ignored)
        if parent is not None and parent == parent and index.get(int(parent), k) < k:
            children.setdefault(index[int(parent)], []).append(k)
    own: list[list[int]] = [[] for _ in ids]
    accessed: list[set[int]] = [set() for _ in ids]      # by the op and the ops below it
    read: list[dict[int, float]] = [{} for _ in ids]      # by them, before anything inside the op wrote it
    written: list[set[int]] = [set() for _ in ids]
    last = list(range(len(ids)))                          # position of the last op below it (itself without)
    for k in reversed(range(len(ids))):                   # every op below k is done before k
        below: set[int] = set()
        for child in children.get(k, []):
            below |= accessed[child]
            read[k].update((s, b) for s, b in read[child].items() if s not in written[k])
            written[k] |= written[child]
            last[k] = max(last[k], last[child])
        if _touches_data(str(names[k])):
            own[k] = [s for s in list(inputs[k]) + [s for s in outputs[k] if s not in inputs[k]] if s not in below]
        read[k].update((s, inputs[k][s]) for s in own[k] if s in inputs[k] and s not in written[k])
        written[k] |= {s for s in own[k] if s in outputs[k]}
        accessed[k] = below | set(own[k])
    ending: dict[int, list[int]] = {}
    for k in reversed(range(len(ids))):
        ending.setdefault(last[k], []).append(k)
    return own, [{**read[k], **inputs[k]} for k in range(len(ids))], ending


def cached_bytes(distance: float, size: float, capacity_bytes: float) -> float:
    """Bytes of a storage still in an LRU cache of ``capacity_bytes`` after ``distance`` bytes of other data:
    ``clip(capacity - distance, 0, size)``."""
    return min(max(capacity_bytes - distance, 0.0), size)


def warm_share(reuse: Reuse | Sequence[Sequence[float]], capacity_bytes: float) -> float:
    """Share of an op's input bytes still cached under LRU with ``capacity_bytes`` (NaN when the op has no sized
    inputs, or no capacity)."""
    total = sum(entry[1] for entry in reuse)
    if not total or not capacity_bytes or capacity_bytes <= 0:
        return math.nan
    return sum(cached_bytes(entry[0], entry[1], capacity_bytes) for entry in reuse) / total
