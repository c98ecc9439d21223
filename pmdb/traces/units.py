"""The units a rank is simulated in, found in its stored trace rows (Kineto rows when the rank has a Kineto trace,
else ET rows): top-level CPU ops in start order, ops that contain a collective replaced by their children, and
synchronize calls made outside any op. Also each unit's shapes and scalars (from the linked ET row when the Kineto
row lacks them), its nested ops and the unit every row lies in. Times are µs."""
from __future__ import annotations

import re
from typing import Any

import pandas as pd

from pmdb.traces.rows import RankFrames, top_level_mask
from pmdb.traces.graph import Op, Stream
from pmdb.traces.reuse import reuse_distances

# runtime calls that block the host until device work is done, and the streams they wait for
SYNC_CALLS = {"cudaDeviceSynchronize": (Stream.COMPUTE, Stream.COMM), "cudaStreamSynchronize": (Stream.COMPUTE,),
              "cudaEventSynchronize": (Stream.COMPUTE,), "cudaMemcpy": (Stream.COMPUTE,)}
_COLLECTIVE_NAMES = (("allreduce", "all_reduce"), ("alltoall", "all_to_all"), ("allgather", "all_gather"),
                     ("reducescatter", "reduce_scatter"), ("broadcast", "broadcast"), ("barrier", "barrier"),
                     ("reduce", "reduce"), ("send", "send"), ("recv", "recv"))


def collective_kind(name: str) -> str:
    """'all_reduce', 'all_to_all', ... from an op, annotation or kernel name."""
    flat = re.sub(r"[^a-z]", "", name.lower())
    for key, kind in _COLLECTIVE_NAMES:
        if key in flat:
            return kind
    return "collective"


def nan_or(value: Any) -> float:
    """A float, NaN for missing values."""
    return float("nan") if value is None else float(value)  # float(NaN) stays NaN


class RankUnits:
    """The units of one rank and their iterations."""

    def __init__(self, frames: RankFrames, with_shapes: bool = True, reuse: bool = False):
        self.frames = frames
        self.with_shapes = with_shapes  # False: shapes were not read (replay), children carry names only
        timed = frames.kineto_ops is not None
        base = frames.kineto_ops if timed else frames.ops[frames.ops["category"] != "et_root"]
        self.timed = timed
        self.base = base.reset_index(drop=True)
        self.row = {int(i): k for k, i in enumerate(self.base["op_id"])}
        self.cols = {c: self.base[c].tolist() for c in ("name", "category", "start_us", "dur_us", "is_collective",
                                                         "input_shapes", "attrs")}
        self.cols["linked_op_id"] = [None if v is None or v != v else int(v) for v in self.base["linked_op_id"]]
        self.et: dict[int, dict[str, Any]] = {}
        if frames.et_trace_id is not None:
            et = frames.ops
            self.et = {int(i): {"input_shapes": s, "attrs": a, "input_tensors": t} for i, s, a, t in
                       zip(et["op_id"], et["input_shapes"], et["attrs"], et["input_tensors"])}
            if reuse:   # each op's input reuse distances (the frames were read with tensor sizes)
                for op_id, reuse in reuse_distances(et, *self._et_times()).items():
                    self.et[op_id]["reuse"] = reuse
        self.parent = {int(i): (None if p is None or p != p else int(p)) for i, p in zip(self.base["op_id"],
                                                                                          self.base["parent_id"])}
        self.children: dict[int, list[int]] = {}
        for op_id, parent in self.parent.items():
            if parent is not None:
                self.children.setdefault(parent, []).append(op_id)
        self._shapes: dict[int, tuple[list[Any], dict[str, Any], dict[str, Any] | None]] = {}
        self._nested: dict[int, list[tuple[str, list[Any]]]] = {}
        self.units = self._units()
        self.unit_of = self._unit_of()
        launches = frames.kernels["launch_dur_us"].dropna() if len(frames.kernels) else pd.Series(dtype=float)
        self.typical_launch_us = float(launches.median()) if len(launches) else 0.0

    def _et_times(self) -> tuple[dict[int, tuple[float, float]] | None, float | None]:
        """ET op id -> the traced (start, end) µs of the Kineto op linked to it (the first where several are), and
        the traced iterations' median length (None: none marked); (None, None) without a Kineto trace."""
        if not self.timed:
            return None, None
        out: dict[int, tuple[float, float]] = {}
        for linked, start, dur in zip(self.cols["linked_op_id"], self.cols["start_us"], self.cols["dur_us"]):
            if linked is not None and linked not in out and start == start and dur == dur:
                out[linked] = (float(start), float(start) + float(dur))
        durations = self.frames.iterations["dur_us"].dropna() if self.frames.iterations is not None else ()
        return out, (float(durations.median()) if len(durations) else None)

    # ---- structure -------------------------------------------------------------------------------------------
    def col(self, op_id: int, column: str) -> Any:
        return self.cols[column][self.row[op_id]]

    def _units(self) -> list[int]:
        base = self.base
        is_op = (base["category"] == "cpu_op").to_numpy()
        coll = (base["is_collective"].to_numpy(dtype=bool)) & is_op
        has_coll = dict(zip(base["op_id"].astype(int), coll))
        for op_id in base["op_id"].astype(int)[::-1]:        # children start after their parents
            parent = self.parent[op_id]
            if has_coll[op_id] and parent is not None and parent in has_coll:
                has_coll[parent] = True
        units: list[int] = []

        def add(op_id: int) -> None:
            if has_coll[op_id] and not self.col(op_id, "is_collective") and self.children.get(op_id):
                for child in self.children[op_id]:
                    if self.col(child, "category") == "cpu_op" or self.col(child, "name") in SYNC_CALLS:
                        add(child)
            else:
                units.append(op_id)

        tops = base[top_level_mask(base).to_numpy()]["op_id"].astype(int)
        for op_id in tops:
            add(op_id)
        inside = self._inside_ops(set(units))
        syncs = base[base["name"].isin(list(SYNC_CALLS)).to_numpy()]["op_id"].astype(int)
        units.extend(s for s in syncs if s not in inside)    # synchronize calls made outside any op
        if not self.timed:
            return sorted(units)
        return sorted(units, key=lambda u: (nan_or(self.col(u, "start_us")), u))

    def _inside_ops(self, units: set[int]) -> set[int]:
        inside = set()
        for op_id in self.parent:
            current = self.parent[op_id]
            while current is not None:
                if current in units:
                    inside.add(op_id)
                    break
                current = self.parent.get(current)
        return inside

    def _unit_of(self) -> dict[int, int]:
        """Kineto (or ET) op id -> the unit it lies in."""
        out: dict[int, int] = {u: u for u in self.units}
        for op_id in self.parent:
            chain, current = [], op_id
            while current is not None and current not in out:
                chain.append(current)
                current = self.parent.get(current)
            found = out.get(current) if current is not None else None
            for node in chain:
                if found is not None:
                    out[node] = found
        return out

    # ---- ops ---------------------------------------------------------------------------------------------------
    def twin(self, op_id: int) -> dict[str, Any] | None:
        """The ET row of a Kineto op (or the row itself on an ET-only rank)."""
        if not self.timed:
            return self.et.get(op_id)
        linked = self.col(op_id, "linked_op_id")
        return None if linked is None else self.et.get(linked)

    def shapes(self, op_id: int) -> tuple[list[Any], dict[str, Any], dict[str, Any] | None]:
        """(input shapes, attributes, ET twin) of a row; the row's own fields win over its twin's."""
        if op_id in self._shapes:
            return self._shapes[op_id]
        self._shapes[op_id] = found = self._find_shapes(op_id)
        return found

    def _find_shapes(self, op_id: int) -> tuple[list[Any], dict[str, Any], dict[str, Any] | None]:
        twin = self.twin(op_id)
        shapes = self.col(op_id, "input_shapes")
        if not isinstance(shapes, list) and twin is not None:
            shapes = twin["input_shapes"]
        attrs = dict(self.col(op_id, "attrs") or {})
        if twin is not None and isinstance(twin["attrs"], dict):
            attrs = {**twin["attrs"], **attrs}
        return shapes if isinstance(shapes, list) else [], attrs, twin

    def descendants(self, op_id: int) -> list[int]:
        out, stack = [], list(reversed(self.children.get(op_id, [])))
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(reversed(self.children.get(node, [])))
        return out

    def nested_ops(self, op_id: int) -> list[tuple[str, list[Any]]]:
        """(name, input shapes) of every CPU op below an op, depth first in start order (shapes empty when they
        were not read); built once per op from its children's lists."""
        if op_id in self._nested:
            return list(self._nested[op_id])
        out: list[tuple[str, list[Any]]] = []
        for child in self.children.get(op_id, []):
            if self.col(child, "category") == "cpu_op":
                out.append((self.col(child, "name"), self.shapes(child)[0] if self.with_shapes else []))
            out.extend(self.nested_ops(child))
        self._nested[op_id] = out
        return list(out)

    def sub_ops(self, op_id: int) -> list[Op]:
        """The direct child CPU ops of an op as Ops, recursively (names, shapes, measured durations)."""
        out = []
        for child in self.children.get(op_id, []):
            if self.col(child, "category") != "cpu_op":
                continue
            shapes, attrs, twin = self.shapes(child)
            out.append(Op(name=self.col(child, "name"), input_shapes=shapes, attrs=attrs, op_id=child,
                          start_us=nan_or(self.col(child, "start_us")), cpu_dur_us=nan_or(self.col(child, "dur_us")),
                          children=self.nested_ops(child), sub=self.sub_ops(child),
                          reuse=twin.get("reuse", ()) if twin is not None else ()))
        return out
