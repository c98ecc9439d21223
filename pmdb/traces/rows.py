"""Read stored trace sets back, for the simulator and the fitters (times µs, sizes bytes).

``load_trace_set(store, id)`` gives per rank a :class:`RankFrames`: ``ops`` in execution order (the ET rows, which
carry the linked Kineto timing, when the rank has an ET; otherwise the Kineto CPU events), the raw Kineto rows,
device events, complete iterations, and producer -> consumer edges by tensor storage id (:func:`storage_edges`).
Only traces of completed runs are read.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from pmdb.traces.vocabulary import common, split_top_level
from pmdb.errors import PmdbError
from pmdb.traces.gc_pause import collector_paused
from pmdb.store import Store

JSON_COLUMNS = ("input_shapes", "output_shapes", "input_tensors", "output_tensors", "attrs")
STORAGE = 2  # position of the storage id in a stored tensor entry [arg, tensor_id, storage_id, ...]


@dataclass
class RankFrames:
    """One rank of a trace set."""

    rank: int
    ops: pd.DataFrame                  # execution order (op_id); ET rows when the rank has an ET, else Kineto rows
    kineto_ops: pd.DataFrame | None    # Kineto CPU events (op_id = start order), None without a Kineto trace
    kernels: pd.DataFrame              # device events (empty on CPU traces)
    iterations: pd.DataFrame           # complete iterations of the Kineto trace: iteration, start_us, dur_us, marker
    kineto_trace_id: int | None
    et_trace_id: int | None

    def top_level(self) -> pd.DataFrame:
        """Outermost CPU ops (their ancestors are annotations only), in execution order."""
        return self.ops[top_level_mask(self.ops)]

    def edges(self, level: str = "top") -> pd.DataFrame:
        """Producer -> consumer edges by storage id between ``level`` 'top' (top-level) or 'all' ops."""
        return storage_edges(self.ops, level=level)


def _decode(frame: pd.DataFrame) -> pd.DataFrame:
    for col in JSON_COLUMNS:
        if col in frame:
            frame[col] = [json.loads(v) if isinstance(v, str) else v for v in frame[col]]
    return frame


@collector_paused()   # decoded JSON values: 10^5 containers (pmdb.traces.gc_pause)
def load_ops(store: Store, trace_id: int, columns: list[str] | None = None) -> pd.DataFrame:
    """The trace_ops rows of one trace (all columns, or ``columns``), op_id order, JSON columns decoded."""
    wanted = ", ".join(f'"{c}"' for c in columns) if columns else "* EXCLUDE (trace_id)"
    frame = store.query(f"SELECT {wanted} FROM trace_ops WHERE trace_id = ? ORDER BY op_id", [trace_id])
    return _decode(frame)


def load_kernels(store: Store, trace_id: int) -> pd.DataFrame:
    return store.query("SELECT * EXCLUDE (trace_id) FROM trace_kernels WHERE trace_id = ? ORDER BY kernel_index",
                       [trace_id])


@collector_paused()
def load_trace_set(store: Store, trace_set_id: int) -> dict[int, RankFrames]:
    """rank -> RankFrames of a trace set (traces of completed runs only)."""
    traces = store.query(
        "SELECT t.trace_id, t.rank, t.kind FROM traces t JOIN collection_runs r USING (run_id) "
        "JOIN trace_sets s USING (trace_set_id) JOIN collection_runs sr ON sr.run_id = s.run_id "
        "WHERE t.trace_set_id = ? AND r.status = 'completed' AND sr.status = 'completed' ORDER BY t.rank, t.kind",
        [trace_set_id])
    if traces.empty:
        raise PmdbError(f"no completed trace set {trace_set_id}")
    out: dict[int, RankFrames] = {}
    for rank, group in traces.groupby("rank"):
        ids = dict(zip(group["kind"], group["trace_id"].astype(int)))
        kid, eid = ids.get("kineto"), ids.get("et")
        kineto_ops = load_ops(store, kid) if kid is not None else None
        ops = load_ops(store, eid) if eid is not None else kineto_ops
        kernels = load_kernels(store, kid) if kid is not None else pd.DataFrame()
        iterations = (store.query("SELECT iteration, start_us, dur_us, marker FROM trace_iterations "
                                  "WHERE trace_id = ? ORDER BY iteration", [kid]) if kid is not None
                      else pd.DataFrame(columns=["iteration", "start_us", "dur_us", "marker"]))
        out[int(rank)] = RankFrames(int(rank), ops, kineto_ops, kernels, iterations, kid, eid)
    return out


def _walk(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(is top-level op, id of the top-level op each row lies in or -1), following parent ids."""
    ids = ops["op_id"].to_numpy()
    is_op = (ops["category"] == "cpu_op").to_numpy()
    keys = ids.tolist()
    # a missing parent (NA, NaN) is None: one isna over the column instead of one per step of every walk
    parents = {k: None if gone else p for k, p, gone in zip(keys, ops["parent_id"].tolist(),
                                                            ops["parent_id"].isna().tolist())}
    op_of = dict(zip(keys, is_op.tolist()))
    top_of: dict[int, int] = {}

    def resolve(op_id: int) -> int:
        chain, seen, current, found = [], set(), op_id, -1
        while current is not None and current in op_of and current not in seen:
            if current in top_of:
                found = top_of[current]
                break
            chain.append(current)
            seen.add(current)
            current = parents[current]
        # walk back down: the outermost op on the chain is the top-level op of everything below it
        for node in reversed(chain):
            if found == -1 and op_of[node]:
                found = node
            top_of[node] = found
        return top_of[op_id]

    top = np.array([resolve(i) for i in keys], dtype=np.int64)
    return (top == ids) & is_op, top


def top_level_mask(ops: pd.DataFrame) -> pd.Series:
    """True for CPU ops with no CPU-op ancestor (annotations, ET roots and runtime calls do not count)."""
    return pd.Series(_walk(ops)[0], index=ops.index)


def top_level_of(ops: pd.DataFrame) -> pd.Series:
    """op_id of the top-level op each row lies in (itself for a top-level op), NA outside any."""
    top = _walk(ops)[1]
    return pd.Series(pd.array(np.where(top < 0, None, top), dtype="Int64"), index=ops.index)


@lru_cache(maxsize=4096)
def mutated_arguments(op_schema: str) -> tuple[int, ...]:
    """Argument positions an op schema marks as written (``Tensor(a!)``); '*' separates keyword args, not one."""
    if "(" not in op_schema:
        return ()
    start = end = op_schema.index("(") + 1
    depth = 0
    for end, ch in enumerate(op_schema[start:], start):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
    args = [a for a in split_top_level(op_schema[start:end]) if a and a != "*"]
    return tuple(i for i, a in enumerate(args) if re.search(r"\([a-z]+!\)", a))


def written_storages(name: str, attrs: dict | None, inputs: list | None, outputs: list | None) -> set[int]:
    """Storage ids an op writes: outputs that are not views of its inputs, inputs its schema marks as mutated
    (``Tensor(a!)``), and the known buffer quirks (``c10d::alltoall_base_`` receives into inputs[0] and returns only a
    Work object; ``c10d::allreduce_`` is in place)."""
    read = {t[STORAGE] for t in inputs or []}
    written = {t[STORAGE] for t in outputs or []} - read
    positions = set(common().written_inputs.get(name, ()))
    positions.update(mutated_arguments((attrs or {}).get("op_schema") or ""))
    written.update(t[STORAGE] for t in inputs or [] if t[0] in positions)
    return written


def storage_edges(ops: pd.DataFrame, level: str = "top") -> pd.DataFrame:
    """Producer -> consumer edges: an op that reads a storage depends on the last earlier op (node-id order) that
    wrote it, within the same iteration (storage ids are reused: bucket buffers every iteration, freed memory by
    new tensors, so a writer from another iteration is not a producer). With ``level='top'`` both ends are lifted
    to their top-level ops and edges inside one top-level op are dropped."""
    if level not in ("top", "all"):
        raise PmdbError(f"bad edge level {level!r}: use top or all")
    ordered = ops.sort_values("op_id")
    iterations = ordered["iteration"] if "iteration" in ordered else pd.Series(pd.NA, index=ordered.index)
    last_writer: dict[int, tuple[int, object]] = {}
    rows = []
    for op_id, name, attrs, inputs, outputs, iteration in zip(
            ordered["op_id"], ordered["name"], ordered["attrs"], ordered["input_tensors"],
            ordered["output_tensors"], iterations):
        for storage in {t[STORAGE] for t in inputs or []}:
            producer, produced_in = last_writer.get(storage, (None, None))
            if producer is not None and producer != op_id and (
                    pd.isna(iteration) or pd.isna(produced_in) or produced_in == iteration):
                rows.append((producer, int(op_id), storage))
        for storage in written_storages(name, attrs, inputs, outputs):
            last_writer[storage] = (int(op_id), iteration)
    edges = pd.DataFrame(rows, columns=["producer_id", "consumer_id", "storage_id"])
    if level == "all" or edges.empty:
        return edges
    top = dict(zip(ops["op_id"], top_level_of(ops)))
    edges["producer_id"] = edges["producer_id"].map(top)
    edges["consumer_id"] = edges["consumer_id"].map(top)
    edges = edges.dropna()
    edges = edges[edges["producer_id"] != edges["consumer_id"]].astype("int64")
    return edges.drop_duplicates(["producer_id", "consumer_id"]).reset_index(drop=True)
