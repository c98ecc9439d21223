"""The execution-trace (ET) parser: one parser for every schema, driven by the field paths of
``schemas/et_<version>.json`` (flat 1.0.x nodes or chakra-style nodes with an attrs list).

A node becomes one row: op_id = node id (ids are assigned at op start, so sorted ids are execution order),
parent_id = the node's parent field (``parent`` / ``ctrl_deps``), shapes per argument, tensors flattened to
``[arg, tensor_id, storage_id, offset, numel, itemsize, device]`` (lists of tensors included), the rest in attrs.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import numpy as np
import pandas as pd

from collectors.traces import schemas
from pmdb.traces.vocabulary import common, split_top_level
from pmdb.traces.iterations import et_iterations
from pmdb.errors import PmdbError
from pmdb.traces.gc_pause import collector_paused


@dataclass
class EtTrace:
    """A parsed execution trace: one row per node in id order; ``iterations`` = complete iterations delimited."""

    version: str
    nodes: pd.DataFrame
    iterations: int
    pid: int | None = None


def _integral(value: Any) -> bool:
    """isinstance(value, Integral), by type first for JSON's int (an ABC check costs more than the rest)."""
    return type(value) is int or isinstance(value, Integral)


def _flatten(value: Any, type_: Any, width: int) -> list[list]:
    if not isinstance(type_, str) or not isinstance(value, list):
        return []
    if type_.startswith("Tensor"):
        ok = len(value) == width and all(map(_integral, value[:2]))
        return [value] if ok else []
    if type_.startswith("GenericList[") and type_.endswith("]"):
        inner = split_top_level(type_[len("GenericList["):-1]) or [""]
        inner += [inner[-1]] * (len(value) - len(inner))
        return [t for v, ty in zip(value, inner) for t in _flatten(v, ty, width)]
    return []


def tensors(values: list, types: list, width: int) -> list[list]:
    """Tensor values of a node's inputs or outputs, each prefixed with its argument position."""
    return [[arg, *t] for arg, (v, ty) in enumerate(zip(values, types)) for t in _flatten(v, ty, width)]


def _scalars(values: list, types: list) -> dict[str, Any]:
    out = {}
    for arg, (v, ty) in enumerate(zip(values, types)):
        if isinstance(ty, str) and "Tensor" not in ty and not (isinstance(v, str) and v.startswith("<")):
            out[str(arg)] = v
    return out


def parse_et(doc: dict, where: str) -> EtTrace:
    """Parse an execution-trace JSON document (``where`` names the file in error messages)."""
    if "nodes" not in doc and "traceEvents" in doc:
        raise PmdbError(f"{where}: this is a Kineto trace, not an execution trace: pass it as the Kineto file")
    cfg = schemas.config("et", doc.get("schema"), where)
    nodes = doc.get(cfg["document"]["nodes"])
    if not isinstance(nodes, list) or not nodes:
        raise PmdbError(f"{where}: execution trace without a non-empty '{cfg['document']['nodes']}' list")
    with collector_paused():   # 10^5 rows of acyclic containers
        rows, seen = _node_rows(nodes, cfg, where, doc.get("schema"))
    frame = pd.DataFrame(rows).sort_values("op_id", kind="stable").reset_index(drop=True)
    for col in ("parent_id", "et_tid", "rf_id"):
        frame[col] = pd.array([None if v is None or pd.isna(v) else int(v) for v in frame[col]], dtype="Int64")
    _drop_missing_parents(frame, seen, where)
    frame["subtree_end"] = _subtree_end(frame)
    iteration, complete = et_iterations(frame)
    frame["iteration"] = iteration.astype("Int64")
    pid = doc.get("pid") if isinstance(doc.get("pid"), Integral) else None
    return EtTrace(str(doc.get("schema")), frame, complete, pid)


_FIELDS = ("id", "name", "parent", "input_values", "input_shapes", "input_types", "output_values", "output_shapes",
           "output_types", "input_strides", "output_strides", "attrs")


def _node_rows(nodes: list, cfg: dict, where: str, schema: Any) -> tuple[list[dict[str, Any]], set]:
    """One row per node (the configured fields read, checked and flattened), and the node ids seen."""
    vocab = common()
    paths = dict(cfg["node"], attrs=cfg["attrs_list"])
    fields = [(key, paths.get(key), tuple(paths[key].split(".")) if paths.get(key) else (), key in cfg["required"])
              for key in _FIELDS]
    width = len(cfg["tensor_value"])
    rows, seen = [], set()
    for index, node in enumerate(nodes):
        if not isinstance(node, dict):
            raise PmdbError(f"{where}: node #{index} is not a JSON object")
        got = {}
        for key, path, parts, required in fields:
            value, found = node, bool(parts)
            for part in parts:   # the field's dotted path in nested objects
                if not isinstance(value, dict) or part not in value:
                    value, found = None, False
                    break
                value = value[part]
            if not found:
                if required:
                    raise PmdbError(f"{where}: node #{index} (id {node.get('id')!r}) lacks '{path}', "
                                    f"required by schema {schema}")
                value = None
            got[key] = value
        node_id, name = got["id"], got["name"]
        if not _integral(node_id) or not isinstance(name, str):
            raise PmdbError(f"{where}: node #{index} has a non-integer id or non-string name ({node_id!r}, {name!r})")
        if node_id in seen:
            raise PmdbError(f"{where}: node id {node_id} appears twice")
        seen.add(node_id)
        attrs = _attrs(node, got["attrs"], cfg, where, index)
        for key in ("input_values", "input_types", "output_values", "output_types"):
            if not isinstance(got[key], list):
                raise PmdbError(f"{where}: node {node_id}: '{paths[key]}' is not a list")
        parent = got["parent"] if _integral(got["parent"]) and got["parent"] != node_id else None
        op_schema = attrs.get("op_schema") or ""
        extra = {k: v for k, v in attrs.items() if k not in ("rf_id", "tid") and v not in ("", None)}
        extra.update(input_types=got["input_types"], output_types=got["output_types"],
                     scalars=_scalars(got["input_values"], got["input_types"]))
        for key in ("input_strides", "output_strides"):
            if got[key] is not None:
                extra[key] = got[key]
        if name.startswith(vocab.et_root_prefix):
            category = "et_root"
        elif op_schema or name.startswith(("aten::", "c10d::")):
            category = "cpu_op"
        else:
            category = "user_annotation"
        rows.append({"op_id": int(node_id), "name": name, "parent_id": parent, "et_tid": attrs.get("tid"),
                     "rf_id": attrs.get("rf_id"), "category": category,
                     "is_collective": bool(vocab.collective_ops.search(name)),
                     "input_shapes": got["input_shapes"], "output_shapes": got["output_shapes"],
                     "input_tensors": tensors(got["input_values"], got["input_types"], width),
                     "output_tensors": tensors(got["output_values"], got["output_types"], width),
                     "attrs": extra})
    return rows, seen


def _drop_missing_parents(frame: pd.DataFrame, ids: set, where: str) -> None:
    """Nodes naming a parent the trace does not hold become top-level nodes, with one warning line on stderr (a
    cut or edited trace): their ops are kept, not silently nested under nothing."""
    missing = [not pd.isna(p) and int(p) not in ids for p in frame["parent_id"]]
    count = sum(missing)
    if not count:
        return
    first = frame.loc[missing].iloc[0]
    print(f"pmdb: warning: {where}: {count} node(s) name a parent that is not in the trace (node "
          f"{int(first['op_id'])}: parent {int(first['parent_id'])}); they are read as top-level nodes",
          file=sys.stderr)
    frame.loc[missing, "parent_id"] = None


def _attrs(node: dict, attrs_value: Any, cfg: dict, where: str, index: int) -> dict[str, Any]:
    """The configured attributes of a node, from its attrs list (chakra) or its own fields (flat)."""
    if cfg["attrs_list"]:
        if not isinstance(attrs_value, list):
            raise PmdbError(f"{where}: node #{index}: '{cfg['attrs_list']}' is not a list")
        source = {}
        for item in attrs_value:
            if not isinstance(item, dict) or "name" not in item:
                raise PmdbError(f"{where}: node #{index}: an attrs entry lacks 'name'")
            source[item["name"]] = item.get("value")
    else:
        source = node
    return {key: source[raw] for key, raw in cfg["attrs"].items() if raw in source}


def _subtree_end(frame: pd.DataFrame) -> np.ndarray:
    """Largest node id under each node (itself included), following parent ids."""
    end = dict(zip(frame["op_id"], frame["op_id"]))
    for op_id, parent in zip(frame["op_id"][::-1], frame["parent_id"][::-1]):
        if parent is not pd.NA and parent in end and parent < op_id:
            end[parent] = max(end[parent], end[op_id])
    return frame["op_id"].map(end).to_numpy()
