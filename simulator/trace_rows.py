"""Read the stored rows of a trace set that a prediction needs, fast: only the chosen iterations, tensor fields
extracted by DuckDB (argument, storage id, numel, item size) instead of decoding every JSON value in Python, and
shapes and scalars only when model mode asks for them. Returns :class:`collectors.traces.read.RankFrames` so the
rest of the simulator reads one layout. Times µs."""
from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from collectors.traces.read import RankFrames
from pmdb.errors import PmdbError
from pmdb.store import Store

# a stored tensor entry is [arg, tensor_id, storage_id, offset, numel, itemsize, device]: keep what is used
_TENSORS = ("CAST(json_extract({c}, '$[*][0]') AS BIGINT[]) AS {c}_arg, "
            "CAST(json_extract({c}, '$[*][2]') AS BIGINT[]) AS {c}_storage")
_SIZES = ("CAST(json_extract(input_tensors, '$[*][0]') AS BIGINT[]) AS arg, "
          "CAST(json_extract(input_tensors, '$[*][4]') AS BIGINT[]) AS numel, "
          "CAST(json_extract(input_tensors, '$[*][5]') AS BIGINT[]) AS item")
_KINETO = ("op_id, name, parent_id, thread, iteration, start_us, dur_us, linked_op_id, category, is_collective")
_ET = ("op_id, name, parent_id, thread, iteration, start_us, dur_us, category, is_collective, linked_op_id, "
       "attrs->>'$.op_schema' AS op_schema")


def _fetch(store: Store, sql: str, params: list[Any]) -> pd.DataFrame:
    """A query's rows as a DataFrame through NumPy (faster than the Arrow-backed default); NULL -> None/NaN."""
    result = store.conn.execute(sql, params).fetchnumpy()
    columns = {}
    for name, values in result.items():
        if isinstance(values, np.ma.MaskedArray):
            data = values.data.astype(object if values.dtype == object else float)
            data[values.mask] = None if values.dtype == object else np.nan
            values = data
        columns[name] = values
    return pd.DataFrame(columns)


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
    """Decoded JSON values; keys whose value is null (an attribute the row lacks) are left out of objects."""
    out = [json.loads(v) if isinstance(v, str) else v for v in values]
    return [{k: x for k, x in v.items() if x is not None} if isinstance(v, dict) else v for v in out]


def _ints(values: Any) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _entries(arg: Any, storage: Any, sizes: dict[int, tuple[Any, Any]] | None = None) -> list[list[int]]:
    """Tensor entries [arg, 0, storage_id, 0, numel, itemsize] from the extracted arrays (sizes of collectives'
    inputs by argument; None/NaN: no tensors)."""
    if arg is None or isinstance(arg, float):
        return []
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


def _collective_sizes(store: Store, trace_id: int) -> dict[int, dict[int, tuple[int, int]]]:
    """ET op id -> argument -> (numel, itemsize) summed over the argument's tensors, for collectives only."""
    frame = _fetch(store, f"SELECT op_id, {_SIZES} FROM trace_ops WHERE trace_id = ? AND is_collective", [trace_id])
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for op_id, args, numels, items in zip(frame["op_id"], frame["arg"], frame["numel"], frame["item"]):
        if args is None or isinstance(args, float):
            continue
        per: dict[int, tuple[int, int]] = {}
        for a, n, i in zip(args, numels, items):
            numel, item = per.get(int(a), (0, int(i or 0)))
            per[int(a)] = (numel + int(n or 0), int(i or 0) or item)
        out[int(op_id)] = per
    return out


# the attributes the simulator reads (scalar inputs and input types), extracted in SQL: whole attrs are large
_ATTRS = ("json_object('scalars', attrs->'$.scalars', 'concrete_inputs', attrs->'$.concrete_inputs', "
          "'input_types', attrs->'$.input_types') AS attrs")


def _kineto(store: Store, trace_id: int, iterations: list[int] | None, shapes: bool) -> pd.DataFrame:
    cols = _KINETO + (f", input_shapes, {_ATTRS}" if shapes else "")
    where = "" if iterations is None else f" AND iteration IN ({','.join(str(int(k)) for k in iterations)})"
    frame = _fetch(store, f"SELECT {cols} FROM trace_ops WHERE trace_id = ?{where} ORDER BY op_id", [trace_id])
    if shapes:
        frame["input_shapes"], frame["attrs"] = _json(frame["input_shapes"]), _json(frame["attrs"])
    else:
        frame["input_shapes"], frame["attrs"] = None, [{} for _ in range(len(frame))]
    return frame


def _et(store: Store, trace_id: int, id_range: tuple[int, int] | None, shapes: bool,
        iterations: list[int] | None = None) -> pd.DataFrame:
    cols = _ET + ", " + _TENSORS.format(c="input_tensors") + ", " + _TENSORS.format(c="output_tensors")
    if shapes:
        cols += f", input_shapes, {_ATTRS}"
    where = "" if id_range is None else f" AND op_id BETWEEN {int(id_range[0])} AND {int(id_range[1])}"
    if iterations is not None:  # an ET without a Kineto trace: its own iteration markers
        where += f" AND iteration IN ({','.join(str(int(k)) for k in iterations)})"
    frame = _fetch(store, f"SELECT {cols} FROM trace_ops WHERE trace_id = ?{where} ORDER BY op_id", [trace_id])
    sizes = _collective_sizes(store, trace_id)
    frame["input_tensors"] = [_entries(a, s, sizes.get(int(i))) for i, a, s in
                              zip(frame["op_id"], frame["input_tensors_arg"], frame["input_tensors_storage"])]
    frame["output_tensors"] = [_entries(a, s) for a, s in zip(frame["output_tensors_arg"],
                                                              frame["output_tensors_storage"])]
    frame = frame.drop(columns=[f"{c}_{f}" for c in ("input_tensors", "output_tensors") for f in ("arg", "storage")])
    schemas = [None if s is None or (isinstance(s, float) and np.isnan(s)) else s for s in frame["op_schema"]]
    if shapes:
        frame["input_shapes"] = _json(frame["input_shapes"])
        frame["attrs"] = [dict(a or {}, op_schema=s) for a, s in zip(_json(frame["attrs"]), schemas)]
    else:
        frame["input_shapes"] = None
        frame["attrs"] = [{"op_schema": s} for s in schemas]
    return frame.drop(columns=["op_schema"])


def load_rank_frames(store: Store, trace_set_id: int, iterations: list[int] | None = None,
                     shapes: bool = False) -> dict[int, RankFrames]:
    """rank -> the rows of ``iterations`` (all when None) of a trace set; ``shapes`` also reads input shapes and
    attributes (model mode). ET rows are read over the id range linked to the chosen Kineto rows."""
    out: dict[int, RankFrames] = {}
    for rank, group in _traces(store, trace_set_id).groupby("rank"):
        ids = dict(zip(group["kind"], group["trace_id"].astype(int)))
        kid, eid = ids.get("kineto"), ids.get("et")
        kineto = _kineto(store, kid, iterations, shapes) if kid is not None else None
        et = None
        if eid is not None:
            linked = kineto["linked_op_id"].dropna() if kineto is not None else pd.Series(dtype=float)
            id_range = (int(linked.min()), int(linked.max())) if len(linked) and iterations is not None else None
            et = _et(store, eid, id_range, shapes, iterations if kineto is None else None)
        kernels = (store.query("SELECT * EXCLUDE (trace_id) FROM trace_kernels WHERE trace_id = ? AND op_id IN "
                               "(SELECT op_id FROM trace_ops WHERE trace_id = ?"
                               + ("" if iterations is None else
                                  f" AND iteration IN ({','.join(str(int(k)) for k in iterations)})")
                               + ") ORDER BY kernel_index", [kid, kid]) if kid is not None else pd.DataFrame())
        its = (store.query("SELECT iteration, start_us, dur_us, marker FROM trace_iterations WHERE trace_id = ? "
                           "ORDER BY iteration", [kid]) if kid is not None
               else pd.DataFrame(columns=["iteration", "start_us", "dur_us", "marker"]))
        if iterations is not None and len(its):
            its = its[its["iteration"].isin(iterations)].reset_index(drop=True)
        ops = et if et is not None else kineto
        out[int(rank)] = RankFrames(int(rank), ops, kineto, kernels, its, kid, eid)
    return out
