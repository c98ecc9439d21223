"""The simulated iteration as a Chrome trace (``pmdb predict --export-trace FILE``): the ``traceEvents`` JSON that
Perfetto and chrome://tracing open, beside the measured Kineto trace (same op and kernel names).

One process per rank (``pid`` = rank, "rank N (predicted)"), one thread per place the engine schedules: the host
thread and the compute and communication streams of an async device; the calling thread and the communication thread
of a sync host (whose compute runs on the calling thread). Every op the engine scheduled is an ``X`` event at its
simulated start and end (µs from the iteration's start), with the op, the predicted µs, the traced µs where the trace
timed it, what priced it (model version, overhead table, roofline, trace) and the error. Waits are events of category
``wait``: the calling thread waiting for a collective or a stream, a stream held by a sync, a collective waiting for
its peers, and "external wait": the host waiting for work outside the rank's trace (other ranks, other threads). The
iteration is the one the prediction simulated from an idle machine (``isolated``); the steady-state time the
prediction reports is in ``otherData``.
"""
from __future__ import annotations

import gzip
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.traces.graph import Op, Stream, TraceGraph
from pmdb.traces.opmap import NO_WORK, map_op
from simulator import semantics as sem_mod
from simulator.engine import OpSpan, SimResult, TimedOp, Timeline, simulate
from simulator.model_set import Overheads
from simulator.replay import replay_programs
from simulator.store_rows import Prediction

COMPUTE, COMM = int(Stream.COMPUTE), int(Stream.COMM)
HOST_TID = 1
_KINETO_CAT = {"Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}   # Kineto's categories of copies and fills
STREAM_TID = {COMPUTE: 2, COMM: 3}


@dataclass
class SimulatedIteration:
    """One iteration as the engine scheduled it, with what the export needs to describe every op."""

    graph: TraceGraph
    programs: list[list[TimedOp]]
    timeline: Timeline
    result: SimResult                     # of this very simulation (equal to the prediction's isolated result)
    semantics: Semantics
    mode: str                             # 'model' or 'replay'
    priced_by: dict[int, str] = field(default_factory=dict)   # id(op) -> model version, 'roofline', ...
    overheads: Overheads | None = None    # model mode: the overhead table that priced the host path


def recorded(graph: TraceGraph, programs: list[list[TimedOp]], engine: sem_mod.AsyncDevice | sem_mod.SyncHost,
             mode: str, priced_by: dict[int, str] | None = None,
             overheads: Overheads | None = None) -> SimulatedIteration:
    """Simulate ``programs`` recording every op's place (the result is the one :func:`simulate` gives without)."""
    timeline = Timeline()
    result = simulate(programs, engine, timeline)
    return SimulatedIteration(graph, programs, timeline, result, Semantics(engine.name), mode,
                              dict(priced_by or {}), overheads)


def replayed(graph: TraceGraph, semantics: Semantics) -> SimulatedIteration:
    """One iteration of a trace set replayed (every time from the trace), recorded."""
    return recorded(graph, replay_programs(graph, semantics), sem_mod.get(semantics), "replay")


# ---- the events -------------------------------------------------------------------------------------------------
def _us(value: float) -> float:
    return round(float(value), 3)


def _traced(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else float(value)


def _judged(args: dict[str, Any], predicted: float, traced: float | None) -> dict[str, Any]:
    """``predicted_us``, ``traced_us`` and ``error_pct`` (100 × (predicted − traced) / traced) into ``args``."""
    args["predicted_us"] = _us(predicted)
    if traced is not None:
        args["traced_us"] = _us(traced)
        if traced > 0:
            args["error_pct"] = round(100.0 * (predicted - traced) / traced, 2)
    return args


def _event(name: str, cat: str, rank: int, tid: int, start: float, end: float, args: dict[str, Any]) -> dict:
    ts = _us(start)
    return {"name": name, "cat": cat, "ph": "X", "pid": rank, "tid": tid, "ts": ts,
            "dur": max(0.0, round(_us(end) - ts, 3)), "args": args}


class _Describer:
    """What priced an op's host part and its kernels (model mode), as short labels."""

    def __init__(self, it: SimulatedIteration):
        self.it = it
        self.sync_host = it.semantics == Semantics.SYNC_HOST
        version = None if it.overheads is None else it.overheads.version
        self.table = "overheads:none (0 µs)" if version is None else f"overheads:{version}"

    def host(self, op: Op) -> str:
        """The op's time on the calling/host thread."""
        it = self.it
        if it.mode == "replay":
            return "trace (replay)"
        if not self.sync_host or op.is_collective:
            return self.table + " (T1-T5)"
        return self._composed(op)

    def _composed(self, op: Op) -> str:
        """A sync-host op's pricing (as :meth:`ModelTiming._op_time` composes it): its model, or the overhead table
        around its nested ops (named with what priced those, beyond the table), or the table, or its traced time."""
        label = self._leaf(op)
        if label is not None:
            return label
        others = sorted(self._leaves(op) - {self.table})
        return f"{self.table} (T2/T3/T5 around nested ops)" + (": " + ", ".join(others) if others else "")

    def _leaf(self, op: Op) -> str | None:
        label = self.it.priced_by.get(id(op))
        if label is not None or op.sub:
            return label
        if map_op(op) is NO_WORK or (self.it.overheads is not None
                                     and self.it.overheads.get(op.name, "T5") is not None):
            return self.table
        return "trace"

    def _leaves(self, op: Op) -> set[str]:
        label = self._leaf(op)
        return {label} if label is not None else set().union(*(self._leaves(c) for c in op.sub))

    def external(self, timed: TimedOp) -> str:
        """What priced a wait for work outside the trace."""
        if self.it.mode == "replay":
            return "trace (the traced wait beyond the rank's own work)"
        return timed.external_by or "trace (traced wait)"

    def kernel(self, op: Op) -> str:
        if self.it.mode == "replay":
            return "trace (replay)"
        return self.it.priced_by.get(id(op), "trace")


def _traced_kernels(op: Op, timed: TimedOp) -> list[tuple[str, float | None]]:
    """Per simulated kernel, the traced kernel's (name, µs) when the program kept the trace's kernels, else the
    op's name and, for a collective's communication, the traced communication time."""
    if len(op.kernels) == len(timed.kernels):
        return [(k.name or op.name, _traced(k.dur_us)) for k in op.kernels]
    comm = [k for k in op.kernels if k.stream == Stream.COMM]
    out: list[tuple[str, float | None]] = []
    for stream, *_ in timed.kernels:
        if stream == COMM and comm:
            out.append((comm[0].name or op.name, _traced(sum(k.dur_us for k in comm))))
        else:
            out.append((op.name, None))
    return out


def _rank_events(it: SimulatedIteration, position: int, spans: list[OpSpan], describe: _Describer) -> list[dict]:
    """The events of the rank at ``position`` in the graph (its process id is its rank)."""
    graph_ops = it.graph.ranks[position].ops
    program = it.programs[position]
    rank = it.graph.ranks[position].rank
    out: list[dict] = []
    for span in spans:
        if span.index >= len(graph_ops):   # the program's closing op: the iteration's tail (T1), idle time
            continue
        op, timed = graph_ops[span.index], program[span.index]
        if span.synced > span.arrive:      # a sync-host caller waits for the collective this op reads
            waited = [graph_ops[j].name for j in op.waits_on if j < len(graph_ops)]
            out.append(_event("wait for collective", "wait", rank, HOST_TID, span.arrive, span.synced,
                              {"op": op.name, "index": span.index, "waits_for": waited}))
        for stream, held_from, held_to in span.stream_waits:   # from the sync's launch, or the stream's last work
            if not describe.sync_host and held_to > max(held_from, span.arrive):
                out.append(_event("stream sync", "wait", rank, STREAM_TID[stream], max(held_from, span.arrive),
                                  held_to, {"op": op.name, "index": span.index}))
        args = {"op": op.name, "index": span.index, "phase": op.phase, "priced_by": describe.host(op),
                "t1_us": _us(span.begin - span.synced)}
        if op.is_collective:
            args["collective"] = op.collective
        if span.host_waits:
            args["wait_us"] = _us(sum(b - a for a, b in span.host_waits))
        if span.external_waits:
            args["external_wait_us"] = _us(sum(b - a for a, b in span.external_waits))
        out.append(_event(op.name, "cpu_op", rank, HOST_TID, span.begin, span.end,
                          _judged(args, span.end - span.begin, _traced(op.cpu_dur_us))))
        for start, end in span.host_waits:
            out.append(_event("wait for stream", "wait", rank, HOST_TID, start, end,
                              {"op": op.name, "index": span.index}))
        for start, end in span.external_waits:
            out.append(_event("external wait", "wait", rank, HOST_TID, start, end,
                              {"op": op.name, "index": span.index, "priced_by": describe.external(timed),
                               "about": "a host wait for work outside this rank's trace (peers, other threads)"}))
        out += _kernel_events(op, timed, span, rank, describe)
    return out


def _kernel_events(op: Op, timed: TimedOp, span: OpSpan, rank: int, describe: _Describer) -> list[dict]:
    """The op's kernels on their streams (on a sync host, its communication only: its compute is the calling
    thread's ``cpu_op`` event); a collective's wait for its peers nested inside it."""
    out = []
    for (stream, start, end, own), (name, traced) in zip(span.kernels, _traced_kernels(op, timed)):
        if describe.sync_host and stream == COMPUTE:
            continue
        args = {"op": op.name, "index": span.index, "phase": op.phase, "priced_by": describe.kernel(op),
                "stream": "communication" if stream == COMM else "compute"}
        if stream == COMM and op.is_collective:
            args["collective"] = op.collective
            if not math.isnan(op.comm_bytes):
                args["bytes"] = int(op.comm_bytes)
        peers = end - (start + own)
        if peers > 1e-6:
            args["wait_for_peers_us"] = _us(peers)
        out.append(_event(name, _KINETO_CAT.get(name.split(" ")[0], "kernel"), rank, STREAM_TID[stream], start,
                          end, _judged(args, own, traced)))
        if peers > 1e-6:
            out.append(_event("wait for peers", "wait", rank, STREAM_TID[stream], start + own, end,
                              {"op": op.name, "index": span.index}))
    return out


def _metadata(rank: int, sync_host: bool) -> list[dict]:
    threads = ({HOST_TID: "calling thread (compute)", STREAM_TID[COMM]: "communication thread"} if sync_host else
               {HOST_TID: "host thread", STREAM_TID[COMPUTE]: "compute stream",
                STREAM_TID[COMM]: "communication stream"})
    out = [{"name": "process_name", "ph": "M", "pid": rank, "tid": 0, "args": {"name": f"rank {rank} (predicted)"}},
           {"name": "process_sort_index", "ph": "M", "pid": rank, "tid": 0, "args": {"sort_index": rank}}]
    for tid, name in threads.items():
        out.append({"name": "thread_name", "ph": "M", "pid": rank, "tid": tid, "args": {"name": name}})
        out.append({"name": "thread_sort_index", "ph": "M", "pid": rank, "tid": tid, "args": {"sort_index": tid}})
    return out


def chrome_trace(pred: Prediction) -> dict[str, Any]:
    """The prediction's simulated iteration as a Chrome trace document (``pred.iteration`` must be recorded:
    ``predict_trace_set(..., timeline=True)``)."""
    it: SimulatedIteration | None = pred.iteration
    if it is None:
        raise PmdbError("this prediction recorded no timeline to export")
    describe = _Describer(it)
    events: list[dict] = []
    for position, (spans, rank_result) in enumerate(zip(it.timeline.ranks, it.result.ranks)):
        graph_rank = it.graph.ranks[position]
        events += _metadata(graph_rank.rank, describe.sync_host)
        step = f"ProfilerStep#{graph_rank.iteration}" if graph_rank.iteration is not None else "iteration"
        events.append(_event(step, "user_annotation", graph_rank.rank, HOST_TID, 0.0, rank_result.predicted_us,
                             _judged({"rank": graph_rank.rank}, rank_result.predicted_us,
                                     _traced(graph_rank.measured_us))))
        events += _rank_events(it, position, spans, describe)
    other = {"tool": "pmdb predict --export-trace", "trace_set": pred.trace_set_id, "mode": pred.mode,
             "source_platform": pred.source_platform, "target_platform": pred.target_platform,
             "semantics": it.semantics.value, "isolated_us": _us(it.result.predicted_us),
             "steady_state_us": _us(pred.predicted_us), "iterations_predicted": pred.iterations,
             "measured_us": None if _traced(pred.measured_us) is None else _us(pred.measured_us),
             "model_set": pred.model_set, "overhead_version": pred.overhead_version,
             "selection": None if pred.model_selection is None else pred.model_selection.label()}
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def check_destination(path: Path) -> None:
    """Refuse (one line) a destination whose folder does not exist or that is a directory, before predicting."""
    path = Path(path)
    if path.is_dir():
        raise PmdbError(f"--export-trace {path}: is a directory; give a file name (.json or .json.gz)")
    if not path.parent.is_dir():
        raise PmdbError(f"--export-trace {path}: no such directory {path.parent}")


def write_chrome_trace(path: Path, pred: Prediction) -> int:
    """Write the prediction's Chrome trace to ``path`` (gzipped when it ends in .gz) atomically; the number of
    events."""
    path = Path(path)
    check_destination(path)
    document = chrome_trace(pred)
    data = json.dumps(document, separators=(",", ":")).encode()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=6)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise PmdbError(f"cannot write {path}: {exc.strerror or exc}") from None
    return sum(e["ph"] == "X" for e in document["traceEvents"])
