"""Link ET nodes to the Kineto events of the same rank, and combine the two into the ET rows.

Linking, in order of preference:

1. by id: ET ``rf_id`` == Kineto ``Record function id`` (else ``External id``, which older Kineto traces carry
   instead), accepted when at least ``id_link_min_name_agreement`` of the ET nodes found by id carry the same op
   name (passes recorded separately reuse small ids for other ops, so ids alone prove nothing); only pairs
   with equal names are linked.
2. by op order: each ET iteration is paired with one complete Kineto iteration (ET iteration j with the j-th
   complete Kineto iteration, cycling when the ET holds more), or the whole traces when either has no iteration
   markers; within a pair the name sequences (ET id order, Kineto start order) are aligned (identical sequences
   link one to one; otherwise difflib's longest matching blocks).

Combining: a linked ET row takes the Kineto op's start, duration, OS thread and category, and its parent follows the
Kineto nesting where the two disagree (ET ``ctrl_deps`` are unreliable near collectives; the ET value is kept in
attrs.ctrl_deps): the Kineto parent's ET twin (when its node id is smaller: a parent starts first, which also keeps
the merged parent links acyclic), or no parent when Kineto shows the op top-level on a thread other than its ET
parent's.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import pandas as pd

from pmdb.traces.vocabulary import common

_STEP = re.compile(r"^(ProfilerStep)#\d+$")


@dataclass
class Link:
    """ET node id -> Kineto op_id, and how it was found ('rf_id', 'external_id', 'op_order'; None: nothing)."""

    method: str | None
    et_to_kineto: dict[int, int]


def _key(name: str) -> str:
    return _STEP.sub(r"\1#", name)


def _et_ops(et: pd.DataFrame) -> pd.DataFrame:
    return et[et["category"] != "et_root"]


def _kineto_ops(kineto: pd.DataFrame) -> pd.DataFrame:
    return kineto[kineto["cls"].isin(["op", "annotation"])]


def link(et: pd.DataFrame, kineto: pd.DataFrame, kineto_iterations: pd.DataFrame) -> Link:
    """Link the nodes of a parsed ET to the ops of a parsed Kineto trace of the same rank."""
    for key in ("rf_id", "external_id"):
        found = _by_id(et, kineto, key)
        if found is not None:
            return Link(key, found)
    found = _by_order(et, kineto, kineto_iterations)
    return Link("op_order" if found else None, found)


def _by_id(et: pd.DataFrame, kineto: pd.DataFrame, key: str) -> dict[int, int] | None:
    k = _kineto_ops(kineto)
    ids = k["rf_id"] if key == "rf_id" else k["attrs"].map(lambda a: a.get("external_id"))
    k = pd.DataFrame({"kid": pd.to_numeric(ids, errors="coerce"), "op_id": k["op_id"],
                      "kname": k["name"].map(_key)}).dropna(subset=["kid"])
    k = k[~k["kid"].duplicated(keep=False)]  # an id seen twice (several threads or processes) proves nothing
    e = _et_ops(et).dropna(subset=["rf_id"])
    hits = e.merge(k, left_on=e["rf_id"].astype("int64"), right_on=k["kid"].astype("int64"))
    if hits.empty:
        return None
    agree = hits["name"].map(_key) == hits["kname"]
    if agree.mean() < common().id_link_min_name_agreement:
        return None
    return dict(zip(hits.loc[agree, "op_id_x"].astype(int), hits.loc[agree, "op_id_y"].astype(int)))


def _by_order(et: pd.DataFrame, kineto: pd.DataFrame, kineto_iterations: pd.DataFrame) -> dict[int, int]:
    e, k = _et_ops(et), _kineto_ops(kineto)
    e_iters = sorted(int(i) for i in e["iteration"].dropna().unique())
    k_iters = sorted(int(i) for i in kineto_iterations["iteration"])
    if not e_iters or not k_iters:
        return _align(e, k)
    out: dict[int, int] = {}
    for j, ei in enumerate(e_iters):
        ki = k_iters[j % len(k_iters)]
        out.update(_align(e[e["iteration"] == ei], k[k["iteration"] == ki]))
    return out


def _align(e: pd.DataFrame, k: pd.DataFrame) -> dict[int, int]:
    e, k = e.sort_values("op_id"), k.sort_values("op_id")
    a, b = [_key(n) for n in e["name"]], [_key(n) for n in k["name"]]
    e_ids, k_ids = e["op_id"].tolist(), k["op_id"].tolist()
    if a == b:
        return dict(zip(e_ids, k_ids))
    out = {}
    for block in difflib.SequenceMatcher(None, a, b, autojunk=False).get_matching_blocks():
        for i in range(block.size):
            out[e_ids[block.a + i]] = k_ids[block.b + i]
    return out


def combine(et: pd.DataFrame, kineto: pd.DataFrame, found: Link) -> tuple[pd.DataFrame, pd.Series]:
    """ET rows with the linked Kineto timing, thread, category and parent; and each Kineto op's ET twin."""
    et = et.copy()
    et["attrs"] = et["attrs"].map(dict)
    mapping = found.et_to_kineto
    reverse = {kid: eid for eid, kid in mapping.items()}
    k = kineto.set_index("op_id")
    linked = et["op_id"].map(mapping)
    has = linked.notna()
    kid = linked[has].astype("int64")
    et["linked_op_id"] = pd.array(linked, dtype="Int64")
    et["start_us"], et["dur_us"], et["thread"] = float("nan"), float("nan"), pd.NA
    et.loc[has, "start_us"] = k.loc[kid, "start_us"].to_numpy()
    et.loc[has, "dur_us"] = k.loc[kid, "dur_us"].to_numpy()
    et["thread"] = pd.array(et["thread"], dtype="Int64")
    et.loc[has, "thread"] = k.loc[kid, "thread"].to_numpy()
    et.loc[has, "category"] = k.loc[kid, "category"].to_numpy()
    thread_of = dict(zip(et["op_id"], et["thread"]))
    kparent_of = dict(zip(kineto["op_id"], kineto["parent_id"]))   # (k.at per row: 50 µs each)
    new_parents = []
    for op_id, parent, kop, attrs in zip(et["op_id"], et["parent_id"], linked, et["attrs"]):
        new = parent
        if not pd.isna(kop):
            kparent = kparent_of[int(kop)]
            if not pd.isna(kparent) and reverse.get(int(kparent), op_id) < op_id:  # parents start first
                new = reverse[int(kparent)]
            elif pd.isna(kparent) and not pd.isna(parent) and not pd.isna(thread_of.get(parent, pd.NA)) \
                    and thread_of[parent] != thread_of[op_id]:
                new = None
        if not (pd.isna(new) and pd.isna(parent)) and (pd.isna(new) or pd.isna(parent) or new != parent):
            attrs["ctrl_deps"] = None if pd.isna(parent) else int(parent)
        new_parents.append(None if pd.isna(new) else int(new))
    et["parent_id"] = pd.array(new_parents, dtype="Int64")
    twin = kineto["op_id"].map(reverse)
    return et, pd.Series(pd.array(twin, dtype="Int64"), index=kineto.index)
