"""Replay timing: every time taken from the trace itself (kernel durations, launch calls, CPU gaps), so that only
the critical path and the synchronisation rules are under test — what trace replayers do. Times µs.

Measured CPU times that contain waiting are corrected so that the engine's synchronisation does not count the wait
twice: host-sync calls are already left out by the graph builder; on a synchronous host, the idle gap before an op
that consumes a collective's output loses its overlap with that collective's execution on the communication thread.

On a GPU, a host wait (a synchronize call, a blocking copy) lasts as long as the rank's own queued work needs; a
traced wait longer than that waited for work outside the trace (other ranks, other threads' launches, events of
other streams): the op carries its traced wait (:func:`traced_wait_us`) and the engine keeps the part its own work
does not explain as an *external wait* (:attr:`simulator.engine.TimedOp.traced_wait_us`).
"""
from __future__ import annotations

import math

from simulator.engine import TimedOp
from pmdb.traces.graph import Op, RankGraph, Stream, TraceGraph
from pmdb.platform import Semantics

COMPUTE, COMM = int(Stream.COMPUTE), int(Stream.COMM)


def _z(value: float) -> float:
    return 0.0 if value is None or math.isnan(value) else float(value)


def _comm_interval(op: Op) -> tuple[float, float] | None:
    """(start, end) of a CPU collective's work on the communication thread, on the trace clock."""
    for k in op.kernels:
        if k.stream == Stream.COMM and not math.isnan(op.start_us):
            begin = op.start_us + _z(op.cpu_dur_us) + _z(k.launch_us)
            return begin, begin + _z(k.dur_us)
    return None


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _consumed_by(graph: RankGraph) -> dict[int, float]:
    """Collective index -> start of the first op that consumes its output (on the trace clock)."""
    out: dict[int, float] = {}
    for op in graph.ops:
        for j in op.waits_on:
            if j not in out and not math.isnan(op.start_us):
                out[j] = op.start_us
    return out


def transfer_times(graph: TraceGraph) -> list[list[float]]:
    """Per collective (in order), per rank, its duration without waiting for peers: a rank that arrives early
    measures the wait inside its collective, which the engine's inter-rank sync models. On a CPU the collective
    starts when the last rank's work starts, and each rank's communication thread finishes it on its own (one may
    be descheduled after the data arrived): per rank, from the last start to its own end, which is no later than
    the start of the op consuming its output (an asynchronous work's recorded end can be its late ``wait``).
    Without start times, the shortest duration over ranks, for every rank."""
    out = []
    indices = [rg.collectives() for rg in graph.ranks]
    consumed = [_consumed_by(rg) for rg in graph.ranks]
    for position in range(min(map(len, indices), default=0)):
        ops = [rg.ops[idx[position]] for rg, idx in zip(graph.ranks, indices)]
        spans = [_comm_interval(op) for op in ops]
        if all(span is not None for span in spans):
            begin = max(span[0] for span in spans)
            ends = [min(span[1], used.get(idx[position], math.inf))
                    for span, used, idx in zip(spans, consumed, indices)]
            out.append([max(0.0, end - begin) for end in ends])
        else:
            shortest = min(sum(_z(k.dur_us) for k in op.kernels if k.stream == Stream.COMM) for op in ops)
            out.append([shortest] * len(ops))
    return out


def one_launch(op: Op) -> list[bool]:
    """Per kernel, whether it came from the same launch call as the kernel before it (a CUDA graph launches many
    kernels in one ``cudaGraphLaunch``): the graph builder gives each such kernel the call's duration and no gap
    before it, and the call is paid once."""
    out, previous = [], None
    for k in op.kernels:
        out.append(previous is not None and k.launch_name == previous.launch_name and k.launch_name != ""
                   and _z(k.gap_before_us) == 0.0 and k.launch_us == previous.launch_us)
        previous = k
    return out


def traced_wait_us(op: Op) -> float | None:
    """The op's host waits as traced (µs): its wall time less its own CPU parts (T2/T5 gaps, launches, T3), which
    the graph builder measured without the waits; None for an op that does not wait for the device."""
    if not op.kernels or not (op.sync_streams or any(k.waits_before for k in op.kernels)) or math.isnan(op.cpu_dur_us):
        return None
    own = sum(_z(k.gap_before_us) + (0.0 if again else _z(k.launch_us))
              for k, again in zip(op.kernels, one_launch(op))) + _z(op.tail_us)
    return max(0.0, op.cpu_dur_us - own)


def replay_rank(graph: RankGraph, semantics: Semantics, transfers: list[float] | None = None) -> list[TimedOp]:
    """The rank's ops with the trace's own times (collectives with ``transfers``, this rank's durations without
    waits, which also end each collective on this rank: see :attr:`TimedOp.after_last_us`); a final op carries the
    measured tail of the iteration."""
    sync_host = semantics == Semantics.SYNC_HOST
    transfer = dict(zip(graph.collectives(), transfers or []))
    out = []
    for index, op in enumerate(graph.ops):
        t1 = _z(op.gap_before_us)
        if sync_host and op.waits_on and t1 > 0:
            for j in op.waits_on:   # from its launch (queued behind other collectives) to its end
                span = _comm_interval(graph.ops[j])
                if span is not None:
                    t1 -= _overlap(op.start_us - t1, op.start_us, graph.ops[j].start_us, span[1])
            t1 = max(0.0, t1)
        if op.kernels:
            comm = [k for k in op.kernels if k.stream == Stream.COMM]
            scale = transfer[index] / sum(_z(k.dur_us) for k in comm) if index in transfer and comm and \
                sum(_z(k.dur_us) for k in comm) > 0 else 1.0
            kernels = tuple((int(k.stream), _z(k.dur_us) * (scale if k.stream == Stream.COMM else 1.0),
                             0.0 if again else _z(k.launch_us), _z(k.gap_before_us))
                            for k, again in zip(op.kernels, one_launch(op)))
            timed = TimedOp(t1=t1, t3=_z(op.tail_us), kernels=kernels,
                            after_last_us=transfer.get(index) if comm and sync_host else None,
                            kernel_waits=op.kernel_waits(), traced_wait_us=None if sync_host else traced_wait_us(op))
        elif sync_host:  # the op's own work runs on the calling thread
            timed = TimedOp(t1=t1, kernels=((COMPUTE, _z(op.cpu_dur_us), 0.0, 0.0),))
        else:
            timed = TimedOp(t1=t1, cpu_us=_z(op.cpu_dur_us))
        timed.is_collective = op.is_collective
        timed.waits_on = op.waits_on
        timed.sync_streams = tuple(int(s) for s in op.sync_streams)
        out.append(timed)
    out.append(TimedOp(t1=_z(graph.tail_us)))
    return out


def replay_programs(graph: TraceGraph, semantics: Semantics) -> list[list[TimedOp]]:
    """Per rank, the replayed program of one iteration."""
    per_rank = list(zip(*transfer_times(graph))) or [() for _ in graph.ranks]
    return [replay_rank(rank, semantics, list(transfers)) for rank, transfers in zip(graph.ranks, per_rank)]
