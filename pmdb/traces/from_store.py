"""Build :class:`~pmdb.traces.graph.TraceGraph` iterations from a stored trace set (times µs, sizes bytes).

Per rank, the units of simulation are the top-level CPU ops of the Kineto trace (ops whose ancestors are only
annotations), in start order over all CPU threads except the communication threads. An op that contains a
collective (a custom autograd Function around ``all_to_all_single``, DDP's gradient hook around
``c10d::allreduce_``) is replaced by its children, so that the collective is a unit of its own and the ops that
consume its output are found. Kernels are the device events launched under a unit; on a CPU trace a unit's own
wall time is its work, and a collective's work is its ``gloo:*`` event on the backend's thread. Host syncs are the
runtime's synchronize calls. The execution trace, when the rank has one, gives shapes and scalars, and the
producer -> consumer edges by tensor storage id (pmdb.traces.rows.storage_edges) that tell which op consumes a
collective's output. Ranks without a Kineto trace are built from the ET alone (no measured times).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from pmdb.traces.iterations import aligned_iteration_us
from pmdb.traces.opmap import needs_nested_ops
from pmdb.traces.rows import storage_edges
from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.store import Store
from pmdb.traces.gc_pause import collector_paused
from pmdb.traces.graph import Kernel, Op, RankGraph, Stream, TraceGraph
from pmdb.traces.phases import optimizer_range, phase_of
from pmdb.traces.set_rows import complete_iterations, linked_counts, load_rank_frames, trace_set_info
from pmdb.traces.state_values import annotate, zero_shares
from pmdb.traces.vocabulary import common
from pmdb.traces.units import SYNC_CALLS, RankUnits, collective_kind, nan_or

BLOCKING_TOLERANCE_US = 50.0  # device and host clocks of a trace disagree by some tens of µs
_ITEMSIZE = {"float": 4, "double": 8, "half": 2, "c10::half": 2, "c10::bfloat16": 2, "bfloat16": 2, "long int": 8,
             "int": 4, "long": 8, "bool": 1, "signed char": 1, "unsigned char": 1, "short int": 2}


def _enclosing(units: RankUnits, unit: int) -> list[str]:
    """Names of the ops and annotations a unit runs inside, innermost first."""
    names, current = [], units.parent.get(unit)
    while current is not None and current in units.row:  # a parent outside the rows read ends the walk
        names.append(str(units.col(current, "name")))
        current = units.parent.get(current)
    return names


def make_op(units: RankUnits, unit: int, kernels: list[tuple], comm_event: tuple[float, float] | None
            ) -> Op:
    """The unit as an Op. ``kernels``: (is_collective, dur, name, launch start, launch dur, start, launch API)
    in launch order (a launch call that returns after its work ended waited for it: a host sync);
    ``comm_event``: (start, duration) of a CPU collective's work on the communication thread."""
    name = units.col(unit, "name")
    shapes, attrs, twin = units.shapes(unit)
    start, dur = nan_or(units.col(unit, "start_us")), nan_or(units.col(unit, "dur_us"))
    below = units.descendants(unit)
    children = units.nested_ops(unit)
    sync_calls = [c for c in below + [unit] if units.col(c, "name") in SYNC_CALLS]
    sync_streams = tuple(sorted({s for c in sync_calls for s in SYNC_CALLS[units.col(c, "name")]}))
    sync_us = sum(nan_or(units.col(c, "dur_us")) for c in sync_calls if c != unit) if units.timed else 0.0
    # (start, duration, streams) of each host wait inside the op, in time order: a wait between two launches is
    # taken out of the gap before the next launch, a wait after the last launch out of the tail (T3)
    waits = sorted((nan_or(units.col(c, "start_us")), nan_or(units.col(c, "dur_us")), SYNC_CALLS[units.col(c, "name")])
                   for c in sync_calls if c != unit) if units.timed else []
    is_coll = bool(units.col(unit, "is_collective")) and units.col(unit, "category") == "cpu_op"
    enclosing = _enclosing(units, unit)
    op = Op(name=name, input_shapes=shapes, attrs=attrs, children=children, op_id=unit, start_us=start,
            cpu_dur_us=dur, sync_streams=sync_streams,
            collective=collective_kind(name) if is_coll else None, phase=phase_of(name, enclosing),
            step_range=optimizer_range(enclosing), reuse=twin.get("reuse", ()) if twin is not None else ())
    if is_coll:
        op.comm_bytes = _comm_bytes(op, twin)
    ks = []
    cursor = start
    blocking = set()
    for is_coll_kernel, k_dur, k_name, launch_start, launch_dur, k_start, launch_name in kernels:
        stream = Stream.COMM if is_coll_kernel else Stream.COMPUTE
        launch_start, launch_dur = nan_or(launch_start), nan_or(launch_dur)
        waited_us, waited_on = 0.0, set()
        while waits and waits[0][0] < launch_start:    # host waits before this launch
            _, wait_dur, streams = waits.pop(0)
            waited_us += 0.0 if wait_dur != wait_dur else wait_dur
            waited_on.update(streams)
        launch_end, k_end = launch_start + launch_dur, float(k_start) + float(k_dur)
        if launch_end >= k_end - BLOCKING_TOLERANCE_US and launch_dur >= max(k_dur, 4 * units.typical_launch_us):
            # the call returned only after its work ended and lasted far longer than a launch: it waited
            # (pageable copy, synchronous memcpy); its own CPU cost is a typical launch plus what follows the work
            blocking.add(stream)
            launch_dur = units.typical_launch_us + max(0.0, launch_end - k_end)
        ks.append(Kernel(stream, float(k_dur), k_name, launch_dur, str(launch_name or ""),
                         max(0.0, launch_start - cursor - waited_us), tuple(sorted(waited_on))))
        cursor = launch_end
    if ks:
        op.tail_us = max(0.0, start + dur - cursor - sum(w[1] for w in waits if w[1] == w[1]))
        op.sync_streams = tuple(sorted(set(op.sync_streams) | blocking))
    elif comm_event is not None:      # CPU collective: the call runs on this thread, the work on gloo's
        end, (work_start, work_dur) = start + dur, comm_event
        if work_start <= end:         # the work started while the call ran: the rest of the call follows it
            ks.append(Kernel(Stream.COMM, work_dur, name, 0.0, "", max(0.0, work_start - start)))
            op.tail_us = end - max(work_start, start)
        else:                         # handed over after the call returned
            ks.append(Kernel(Stream.COMM, work_dur, name, work_start - end, "", dur))
            op.tail_us = 0.0
    else:
        op.cpu_dur_us = dur - sync_us if dur - sync_us > 0 else (0.0 if dur >= 0 else dur)
    op.kernels = ks
    return op


def _tensor_bytes(entries: list, args: tuple[int, ...]) -> float:
    return float(sum(t[4] * t[5] for t in entries or [] if t[0] in args))


def _comm_bytes(op: Op, twin: dict[str, Any] | None) -> float:
    """Message size of a collective (bytes): all_to_all max(sent, received), others the buffer of input 0."""
    pairs = (0, 1) if op.collective == "all_to_all" else (0,)
    if twin is not None and isinstance(twin["input_tensors"], list) and twin["input_tensors"]:
        sizes = [_tensor_bytes(twin["input_tensors"], (a,)) for a in pairs]
        return max(sizes) if op.collective == "all_to_all" else sizes[0]
    types = op.attrs.get("input_types") or []
    out = []
    for arg in pairs:
        shape = op.input_shapes[arg] if arg < len(op.input_shapes) else []
        item = _ITEMSIZE.get(str(types[arg]).lower(), 4) if arg < len(types) else 4
        shapes = shape if shape and isinstance(shape[0], list) else [shape]
        out.append(float(sum(math.prod(s) * item for s in shapes if s)))
    return max(out) if out else float("nan")


def _comm_events(builder: RankUnits) -> dict[int, tuple[float, float]]:
    """CPU collective unit -> (start, duration) of its gloo:* event, matched in start order."""
    base = builder.base
    events = base[(base["category"] != "cpu_op") & base["is_collective"].astype(bool)
                  & base["name"].str.startswith("gloo:")].sort_values("start_us")
    units = [u for u in builder.units if bool(builder.col(u, "is_collective"))
             and builder.col(u, "category") == "cpu_op"]
    out, pointer = {}, 0
    starts, durs = events["start_us"].to_numpy(), events["dur_us"].to_numpy()
    for unit in units:
        begin = nan_or(builder.col(unit, "start_us"))
        while pointer < len(starts) and starts[pointer] < begin:
            pointer += 1
        if pointer < len(starts):
            out[unit] = (float(starts[pointer]), float(durs[pointer]))
            pointer += 1
    return out


def _waits(builder: RankUnits) -> dict[int, set[int]]:
    """Consumer unit -> the collective units whose output it reads (ET storage edges)."""
    frames = builder.frames
    if frames.et_trace_id is None:
        return {}
    et = frames.ops
    edges = storage_edges(et, level="all")
    if edges.empty:
        return {}
    coll = set(et.loc[et["is_collective"].astype(bool) & (et["category"] == "cpu_op"), "op_id"].astype(int))
    to_base = (dict(zip(et["op_id"].astype(int), et["linked_op_id"])) if builder.timed
               else {int(i): int(i) for i in et["op_id"]})
    out: dict[int, set[int]] = {}
    for producer, consumer in zip(edges["producer_id"], edges["consumer_id"]):
        if int(producer) not in coll:
            continue
        p, c = to_base.get(int(producer)), to_base.get(int(consumer))
        if p is None or c is None or pd.isna(p) or pd.isna(c):
            continue
        pu, cu = builder.unit_of.get(int(p)), builder.unit_of.get(int(c))
        if pu is not None and cu is not None and pu != cu:
            out.setdefault(cu, set()).add(pu)
    return out


def _iteration_of(builder: RankUnits) -> dict[int, int | None]:
    base = builder.base
    return {int(i): (None if k is None or k != k else int(k)) for i, k in zip(base["op_id"], base["iteration"])}


def _rank_iterations(builder: RankUnits, wanted: list[int | None], detail: bool) -> dict[int | None, RankGraph]:
    """iteration -> RankGraph of this rank (None when the trace has no complete iterations)."""
    frames = builder.frames
    iteration_of = _iteration_of(builder)
    complete = frames.iterations
    spans = {int(r.iteration): (float(r.start_us), float(r.dur_us)) for r in complete.itertuples()}
    kernels = frames.kernels
    by_unit: dict[int, list[tuple]] = {}
    if len(kernels):
        # device work only: a cuda_sync event records the device side of a host wait, not work
        work = kernels[kernels["category"].isin(common().categories["work"])]
        ks = work.dropna(subset=["op_id"]).sort_values(["launch_start_us", "kernel_index"])
        for op_id, *fields in zip(ks["op_id"], ks["is_collective"], ks["dur_us"], ks["name"],
                                  ks["launch_start_us"], ks["launch_dur_us"], ks["start_us"], ks["launch_name"]):
            unit = builder.unit_of.get(int(op_id))
            if unit is not None:
                by_unit.setdefault(unit, []).append(tuple(fields))
    comm = _comm_events(builder) if not len(kernels) else {}
    waits = _waits(builder)
    out: dict[int | None, RankGraph] = {}
    for k in wanted:
        units = [u for u in builder.units if k is None or iteration_of[u] == k]
        if k in spans and builder.timed:  # ops between two marked iterations belong to neither
            end = spans[k][0] + spans[k][1]
            units = [u for u in units if nan_or(builder.col(u, "start_us")) < end]
        ops, index = [], {}
        previous_end = spans[k][0] if k is not None and k in spans else float("nan")
        for u in units:
            op = make_op(builder, u, by_unit.get(u, []), comm.get(u))
            if detail or needs_nested_ops(op.name):
                op.sub = builder.sub_ops(u)
            op.gap_before_us = max(0.0, op.start_us - previous_end) if not math.isnan(previous_end) else 0.0
            if not math.isnan(op.start_us):
                previous_end = max(previous_end, op.start_us + op.cpu_dur_us) if not math.isnan(previous_end) \
                    else op.start_us + op.cpu_dur_us
            index[u] = len(ops)
            ops.append(op)
        for u, producers in waits.items():
            if u in index:
                op = ops[index[u]]
                op.waits_on = tuple(sorted(index[p] for p in producers if p in index and index[p] < index[u]))
        start, measured = spans.get(k, (float("nan"), float("nan")))
        tail = start + measured - previous_end if k in spans and not math.isnan(previous_end) else 0.0
        graph = RankGraph(frames.rank, ops, measured_us=measured, iteration=k, start_us=start)
        graph.tail_us = max(0.0, tail)
        out[k] = graph
    return out


def _copy_waits(graphs: dict[int | None, RankGraph]) -> None:
    """Iterations the ET did not cover get the dependencies of an ET-covered iteration with the same op sequence."""
    covered = [g for g in graphs.values() if any(op.waits_on for op in g.ops)]
    for graph in graphs.values():
        if any(op.waits_on for op in graph.ops) or not covered:
            continue
        names = [op.name for op in graph.ops]
        for source in covered:
            if [op.name for op in source.ops] == names:
                for op, src in zip(graph.ops, source.ops):
                    op.waits_on = src.waits_on
                break


@collector_paused()   # rows and ops by the 10^5 (pmdb.traces.gc_pause)
def load_graphs(store: Store, trace_set_id: int, *, pick: str = "all", detail: bool = False,
                shapes: bool | None = None, reuse: bool = False, info: dict[str, Any] | None = None,
                marked: dict[int, list[int]] | None = None) -> list[TraceGraph]:
    """TraceGraphs of the complete iterations present on every rank (one when the trace marks none).

    ``pick='all'`` gives every such iteration; ``pick='best'`` only the one model mode sees best (most ops linked to
    the execution trace; the first on ties). ``detail`` also builds each op's child ops (``Op.sub``); ``shapes``
    reads input shapes and attributes (default: when picking for model mode or building details); ``reuse`` also
    gives every op with an ET twin its inputs' reuse distances (``Op.reuse``, :mod:`pmdb.traces.reuse`). With
    shapes, ops that read a recorded optimizer state get its zero share (:mod:`pmdb.traces.state_values`).
    ``info`` (:func:`~pmdb.traces.set_rows.trace_set_info`) and ``marked``
    (:func:`~pmdb.traces.set_rows.complete_iterations`): the set's row and iterations, when the caller read them.
    """
    if pick not in ("all", "best"):
        raise PmdbError(f"bad iteration pick {pick!r}: use all or best")
    info = trace_set_info(store, trace_set_id) if info is None else info
    marked = complete_iterations(store, trace_set_id) if marked is None else marked
    common = set.intersection(*(set(v) if v else {None} for v in marked.values()))
    if not common:
        raise PmdbError(f"trace set {trace_set_id}: its ranks share no complete iteration")
    wanted = sorted(common, key=lambda v: -1 if v is None else v)
    if pick == "best" and None not in common:
        counts = linked_counts(store, trace_set_id)
        wanted = [max(wanted, key=lambda k: (counts.get(k, 0), -k))]
    shapes = (pick == "best" or detail) if shapes is None else shapes
    frames = load_rank_frames(store, trace_set_id, None if None in wanted else wanted, shapes=shapes,
                              tensor_sizes=reuse)
    builders = {rank: RankUnits(f, shapes, reuse) for rank, f in sorted(frames.items())}
    per_rank = {}
    for rank, builder in builders.items():
        graphs = _rank_iterations(builder, wanted, detail)
        _copy_waits(graphs)
        per_rank[rank] = graphs
    out = []
    shares = zero_shares(store, info.get("workload_id")) if shapes else {}
    for k in wanted:
        ranks = [per_rank[r][k] for r in sorted(per_rank)]
        measured = [g.measured_us for g in ranks]
        known = not any(map(math.isnan, measured + [g.start_us for g in ranks]))
        out.append(TraceGraph(ranks, Semantics(info["semantics"]), info["platform"], int(trace_set_id),
                              measured_us=aligned_iteration_us([g.start_us for g in ranks], measured) if known
                              else float("nan")).validate())
        annotate(out[-1], shares)
    return out
