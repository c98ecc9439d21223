"""Read the stored rows of a trace set that a prediction needs, fast: only the chosen iterations, tensor fields
extracted by DuckDB (argument, storage id, numel, item size) instead of decoding every JSON value in Python, and
shapes and scalars only when model mode asks for them. Returns :class:`pmdb.traces.rows.RankFrames` so the
rest of the simulator reads one layout. Times µs."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from pmdb.traces.rows import RankFrames
from pmdb.errors import PmdbError
from pmdb.traces.gc_pause import collector_paused
from pmdb.store import Store

# a stored tensor entry is [arg, tensor_id, storage_id, offset, numel, itemsize, device]: keep what is used
_TENSORS = ("CAST(json_extract({c}, '$[*][0]') AS BIGINT[]) AS {c}_arg, "
            "CAST(json_extract({c}, '$[*][2]') AS BIGINT[]) AS {c}_storage")
# each tensor's size, read when reuse distances are asked for (pmdb.traces.reuse)
_TENSOR_SIZES = ("CAST(json_extract({c}, '$[*][4]') AS BIGINT[]) AS {c}_numel, "
                 "CAST(json_extract({c}, '$[*][5]') AS BIGINT[]) AS {c}_item")
_SIZES = ("CAST(json_extract(input_tensors, '$[*][0]') AS BIGINT[]) AS arg, "
          "CAST(json_extract(input_tensors, '$[*][4]') AS BIGINT[]) AS numel, "
          "CAST(json_extract(input_tensors, '$[*][5]') AS BIGINT[]) AS item")
_KINETO = ("op_id, name, parent_id, thread, iteration, start_us, dur_us, linked_op_id, category, is_collective")
_ET = ("op_id, name, parent_id, thread, iteration, start_us, dur_us, category, is_collective, linked_op_id, "
       "attrs->>'$.op_schema' AS op_schema")


def _frame(result: dict[str, np.ndarray]) -> pd.DataFrame:
    """Columns fetched as NumPy arrays as a DataFrame (faster than the Arrow-backed default); NULL -> None/NaN."""
    columns = {}
    for name, values in result.items():
        if isinstance(values, np.ma.MaskedArray):
            mask = np.ma.getmaskarray(values)
            if mask.any():
                data = values.data.astype(object if values.dtype == object else float)
                data[mask] = None if values.dtype == object else np.nan
                values = data
            else:
                values = values.data
        columns[name] = values
    return pd.DataFrame(columns)


def _fetch_by_trace(store: Store, sql: str, params: list[Any], trace_ids: list[int]) -> dict[int, pd.DataFrame]:
    """trace id -> its rows of a query over several traces (first column ``trace_id``, rows ordered by it), each
    frame as a query of that trace alone would give it (one query instead of one per trace)."""
    result = store.conn.execute(sql, params).fetchnumpy()
    ids = np.asarray(result.pop("trace_id"))
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if len(ids) else np.zeros(0, dtype=int)
    ends = np.r_[starts[1:], len(ids)].astype(int)
    out = {int(ids[a]): _frame({n: v[a:b] for n, v in result.items()}) for a, b in zip(starts, ends)}
    for trace_id in trace_ids:
        if trace_id not in out:
            out[trace_id] = _frame({n: v[0:0] for n, v in result.items()})
    return out


def _split(frame: pd.DataFrame, trace_ids: list[int]) -> dict[int, pd.DataFrame]:
    """trace id -> its rows of a frame with a ``trace_id`` column (which is dropped), index 0..n-1."""
    groups = {int(k): g for k, g in frame.groupby("trace_id", sort=False)}
    empty = frame.iloc[0:0]
    return {t: groups.get(t, empty).drop(columns="trace_id").reset_index(drop=True) for t in trace_ids}


def _in(values: list[int]) -> str:
    return ",".join(str(int(v)) for v in values)


def _traces(store: Store, trace_set_id: int) -> pd.DataFrame:
    frame = store.query(
        "SELECT t.trace_id, t.rank, t.kind FROM traces t JOIN collection_runs r USING (run_id) "
        "JOIN trace_sets s USING (trace_set_id) JOIN collection_runs sr ON sr.run_id = s.run_id "
        "WHERE t.trace_set_id = ? AND r.status = 'completed' AND sr.status = 'completed' ORDER BY t.rank, t.kind",
        [int(trace_set_id)])
    if frame.empty:
        raise PmdbError(f"no completed trace set {trace_set_id}")
    return frame


def complete_iterations(store: Store, trace_set_id: int) -> dict[int, list[int]]:
    """rank -> complete iterations of its Kineto trace, or the iterations its execution trace marks when it has
    no Kineto trace (empty list: none marked)."""
    frame = store.query(
        "SELECT t.rank, i.iteration FROM trace_iterations i JOIN traces t USING (trace_id) "
        "WHERE t.trace_set_id = ? AND t.kind = 'kineto' "
        "UNION SELECT t.rank, o.iteration FROM trace_ops o JOIN traces t USING (trace_id) "
        "WHERE t.trace_set_id = ? AND t.kind = 'et' AND o.iteration IS NOT NULL AND NOT EXISTS "
        "(SELECT 1 FROM traces k WHERE k.trace_set_id = t.trace_set_id AND k.rank = t.rank AND k.kind = 'kineto') "
        "ORDER BY 1, 2", [int(trace_set_id), int(trace_set_id)])
    out = {int(r): [] for r in _traces(store, trace_set_id)["rank"]}
    for rank, k in zip(frame["rank"], frame["iteration"]):
        out[int(rank)].append(int(k))
    return out


def linked_counts(store: Store, trace_set_id: int) -> dict[int, int]:
    """iteration -> Kineto ops linked to the execution trace, summed over ranks (what model mode can see)."""
    frame = store.query("SELECT o.iteration, count(o.linked_op_id) AS n FROM trace_ops o JOIN traces t "
                        "USING (trace_id) WHERE t.trace_set_id = ? AND t.kind = 'kineto' AND o.iteration IS NOT NULL "
                        "GROUP BY o.iteration", [int(trace_set_id)])
    return {int(k): int(n) for k, n in zip(frame["iteration"], frame["n"])}


def _json(values: pd.Series) -> list[Any]:
    """Decoded JSON values; keys whose value is null (an attribute the row lacks) are left out of objects. The texts
    are decoded in one call as one JSON array (a per-value ``json.loads`` costs more than the decoding itself)."""
    out = list(values)
    texts = [i for i, v in enumerate(out) if isinstance(v, str)]
    for i, decoded in zip(texts, json.loads("[" + ",".join(out[i] for i in texts) + "]")):
        out[i] = decoded
    return [{k: x for k, x in v.items() if x is not None} if isinstance(v, dict) else v for v in out]


def _ints(values: Any) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _entries(arg: Any, storage: Any, sizes: dict[int, tuple[Any, Any]] | None = None,
             numel: Any = None, item: Any = None) -> list[list[int]]:
    """Tensor entries [arg, 0, storage_id, 0, numel, itemsize] from the extracted arrays (sizes of collectives'
    inputs by argument; ``numel``/``item``: each tensor's own size, model mode; None/NaN: no tensors)."""
    if arg is None or isinstance(arg, float):
        return []
    if not sizes and isinstance(numel, (list, np.ndarray)) and isinstance(item, (list, np.ndarray)):
        return [[a, 0, s, 0, n or 0, i or 0] for a, s, n, i in zip(_ints(arg), _ints(storage), _ints(numel),
                                                                   _ints(item)) if a is not None and s is not None]
    if not sizes:  # the common case: plain Python ints, no per-element NumPy conversions
        return [[a, 0, s, 0, 0, 0] for a, s in zip(_ints(arg), _ints(storage)) if a is not None and s is not None]
    out, seen = [], set()
    for a, s in zip(_ints(arg), _ints(storage)):
        if a is None or s is None:
            continue
        first = int(a) not in seen  # an argument's summed size goes on its first tensor only
        seen.add(int(a))
        out.append([int(a), 0, int(s), 0, *(sizes.get(int(a), (0, 0)) if first else (0, 0))])
    return out


def _collective_sizes(store: Store, trace_ids: list[int]) -> dict[int, dict[int, dict[int, tuple[int, int]]]]:
    """ET trace id -> op id -> argument -> (numel, itemsize) summed over the argument's tensors, collectives only."""
    frames = _fetch_by_trace(store, f"SELECT trace_id, op_id, {_SIZES} FROM trace_ops WHERE trace_id IN "
                                    f"({_in(trace_ids)}) AND is_collective ORDER BY trace_id, op_id", [], trace_ids)
    out: dict[int, dict[int, dict[int, tuple[int, int]]]] = {}
    for trace_id, frame in frames.items():
        sizes = out.setdefault(trace_id, {})
        for op_id, args, numels, items in zip(frame["op_id"], frame["arg"], frame["numel"], frame["item"]):
            if args is None or isinstance(args, float):
                continue
            per: dict[int, tuple[int, int]] = {}
            for a, n, i in zip(args, numels, items):
                numel, item = per.get(int(a), (0, int(i or 0)))
                per[int(a)] = (numel + int(n or 0), int(i or 0) or item)
            sizes[int(op_id)] = per
    return out


# the attributes the simulator reads (scalar inputs and input types), extracted in SQL: whole attrs are large
_ATTRS = ("json_object('scalars', attrs->'$.scalars', 'concrete_inputs', attrs->'$.concrete_inputs', "
          "'input_types', attrs->'$.input_types', 'input_strides', attrs->'$.input_strides') AS attrs")


def _kineto(store: Store, trace_ids: list[int], iterations: list[int] | None, shapes: bool
            ) -> dict[int, pd.DataFrame]:
    cols = _KINETO + (f", input_shapes, {_ATTRS}" if shapes else "")
    where = "" if iterations is None else f" AND iteration IN ({_in(iterations)})"
    frames = _fetch_by_trace(store, f"SELECT trace_id, {cols} FROM trace_ops WHERE trace_id IN ({_in(trace_ids)})"
                                    f"{where} ORDER BY trace_id, op_id", [], trace_ids)
    for frame in frames.values():
        if shapes:
            frame["input_shapes"], frame["attrs"] = _json(frame["input_shapes"]), _json(frame["attrs"])
        else:
            frame["input_shapes"], frame["attrs"] = None, [{} for _ in range(len(frame))]
    return frames


def _et(store: Store, ranges: dict[int, tuple[int, int] | None], shapes: bool,
        iterations: list[int] | None = None, tensor_sizes: bool = False) -> dict[int, pd.DataFrame]:
    """ET trace id -> its rows over an op id range (None: all), or of ``iterations`` (ETs without a Kineto trace:
    their own iteration markers); ``tensor_sizes``: every tensor entry with its numel and itemsize."""
    if not ranges:
        return {}
    cols = _ET + ", " + _TENSORS.format(c="input_tensors") + ", " + _TENSORS.format(c="output_tensors")
    if shapes:
        cols += f", input_shapes, {_ATTRS}"
    if tensor_sizes:
        cols += ", " + _TENSOR_SIZES.format(c="input_tensors") + ", " + _TENSOR_SIZES.format(c="output_tensors")
    bounds = ", ".join(f"({int(t)}, {int(r[0]) if r else -2 ** 62}, {int(r[1]) if r else 2 ** 62})"
                       for t, r in ranges.items())
    where = "" if iterations is None else f" WHERE iteration IN ({_in(iterations)})"
    ids = list(ranges)
    frames = _fetch_by_trace(store, f"SELECT trace_id, {cols} FROM trace_ops JOIN (VALUES {bounds}) AS "
                                    f"r(r_trace, r_lo, r_hi) ON trace_id = r_trace AND op_id BETWEEN r_lo AND r_hi"
                                    f"{where} ORDER BY trace_id, op_id", [], ids)
    all_sizes = _collective_sizes(store, ids)
    out = {}
    for trace_id, frame in frames.items():
        sizes = all_sizes.get(trace_id, {})
        n = len(frame)
        own = {c: (frame[f"{c}_numel"], frame[f"{c}_item"]) if tensor_sizes else ([None] * n, [None] * n)
               for c in ("input_tensors", "output_tensors")}
        frame["input_tensors"] = [_entries(a, s, sizes.get(int(i)), k, b) for i, a, s, k, b in
                                  zip(frame["op_id"], frame["input_tensors_arg"], frame["input_tensors_storage"],
                                      *own["input_tensors"])]
        frame["output_tensors"] = [_entries(a, s, None, k, b) for a, s, k, b in
                                   zip(frame["output_tensors_arg"], frame["output_tensors_storage"],
                                       *own["output_tensors"])]
        frame = frame.drop(columns=[f"{c}_{f}" for c in ("input_tensors", "output_tensors")
                                    for f in ("arg", "storage") + (("numel", "item") if tensor_sizes else ())])
        schemas = [None if s is None or (isinstance(s, float) and np.isnan(s)) else s for s in frame["op_schema"]]
        if shapes:
            frame["input_shapes"] = _json(frame["input_shapes"])
            frame["attrs"] = [dict(a or {}, op_schema=s) for a, s in zip(_json(frame["attrs"]), schemas)]
        else:
            frame["input_shapes"] = None
            frame["attrs"] = [{"op_schema": s} for s in schemas]
        out[trace_id] = frame.drop(columns=["op_schema"])
    return out


@collector_paused()   # decoded JSON values: 10^5 containers (pmdb.traces.gc_pause)
def load_rank_frames(store: Store, trace_set_id: int, iterations: list[int] | None = None,
                     shapes: bool = False, tensor_sizes: bool = False) -> dict[int, RankFrames]:
    """rank -> the rows of ``iterations`` (all when None) of a trace set; ``shapes`` also reads input shapes and
    attributes (model mode), ``tensor_sizes`` every ET tensor's size (reuse distances). ET rows are read over the id
    range linked to the chosen Kineto rows. Each kind of row is read for every rank in one query."""
    ranks = {int(rank): dict(zip(g["kind"], g["trace_id"].astype(int)))
             for rank, g in _traces(store, trace_set_id).groupby("rank")}
    kids = [ids["kineto"] for ids in ranks.values() if "kineto" in ids]
    kineto = _kineto(store, kids, iterations, shapes) if kids else {}
    linked_ranges, own_iterations = {}, {}
    for ids in ranks.values():
        if "et" not in ids:
            continue
        if "kineto" not in ids:
            own_iterations[ids["et"]] = None
            continue
        linked = kineto[ids["kineto"]]["linked_op_id"].dropna()
        linked_ranges[ids["et"]] = ((int(linked.min()), int(linked.max())) if len(linked) and iterations is not None
                                    else None)
    et = {**_et(store, linked_ranges, shapes, tensor_sizes=tensor_sizes),
          **_et(store, own_iterations, shapes, iterations, tensor_sizes)}
    kernels, its = {}, {}
    if kids:
        same = "" if iterations is None else f" AND o.iteration IN ({_in(iterations)})"
        kernels = _split(store.query(
            f"SELECT k.* FROM trace_kernels k WHERE k.trace_id IN ({_in(kids)}) AND EXISTS (SELECT 1 FROM trace_ops o "
            f"WHERE o.trace_id = k.trace_id AND o.op_id = k.op_id{same}) ORDER BY k.trace_id, k.kernel_index"), kids)
        its = _split(store.query(f"SELECT trace_id, iteration, start_us, dur_us, marker FROM trace_iterations "
                                 f"WHERE trace_id IN ({_in(kids)}) ORDER BY trace_id, iteration"), kids)
    out: dict[int, RankFrames] = {}
    for rank, ids in ranks.items():
        kid, eid = ids.get("kineto"), ids.get("et")
        rank_its = its[kid] if kid is not None else pd.DataFrame(columns=["iteration", "start_us", "dur_us", "marker"])
        if iterations is not None and len(rank_its):
            rank_its = rank_its[rank_its["iteration"].isin(iterations)].reset_index(drop=True)
        ops = et[eid] if eid is not None else kineto[kid]
        out[rank] = RankFrames(rank, ops, kineto.get(kid) if kid is not None else None,
                               kernels[kid] if kid is not None else pd.DataFrame(), rank_its, kid, eid)
    return out


def trace_set_info(store: Store, trace_set_id: int) -> dict[str, Any]:
    """The trace set's row (completed runs only) with its platform's semantics."""
    frame = store.query("SELECT t.*, p.semantics FROM v_trace_sets t JOIN platforms p ON p.name = t.platform "
                        "WHERE t.trace_set_id = ?", [int(trace_set_id)])
    if frame.empty:
        known = store.query("SELECT trace_set_id FROM v_trace_sets ORDER BY trace_set_id")["trace_set_id"].tolist()
        raise PmdbError(f"no completed trace set {trace_set_id} (known: {known_ids(known)})")
    return frame.iloc[0].to_dict()


def known_ids(values: list[Any]) -> str:
    """Up to 20 ids for an error message ('none' when there are none)."""
    return ", ".join(str(v) for v in values[:20]) + (" ..." if len(values) > 20 else "") if values else "none"


def untimed_ranks(store: Store, trace_set_id: int) -> list[int]:
    """Ranks of a trace set without a Kineto trace: their ops carry no times (an execution trace alone)."""
    frame = store.query("SELECT DISTINCT rank FROM traces WHERE trace_set_id = ? AND rank NOT IN "
                        "(SELECT rank FROM traces WHERE trace_set_id = ? AND kind = 'kineto') ORDER BY rank",
                        [int(trace_set_id), int(trace_set_id)])
    return [int(r) for r in frame["rank"]]
