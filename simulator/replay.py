"""Replay timing: every time taken from the trace itself (kernel durations, launch calls, CPU gaps), so that only
the critical path and the synchronisation rules are under test — what trace replayers do. Times µs.

Measured CPU times that contain waiting are corrected so that the engine's synchronisation does not count the wait
twice: host-sync calls are already left out by the graph builder; on a synchronous host, the idle gap before an op
that consumes a collective's output loses its overlap with that collective's execution on the communication thread.
"""
from __future__ import annotations

import math

from simulator.engine import TimedOp
from simulator.graph import Op, RankGraph, Stream, TraceGraph

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


def transfer_times(graph: TraceGraph) -> list[float]:
    """Per collective (in order), its duration without waiting for peers: a rank that arrives early measures the
    wait inside its collective, which the engine's inter-rank sync models. On a CPU the rank whose work started
    last did not wait: its duration is the transfer; without start times, the shortest duration over ranks."""
    out = []
    for ops in zip(*([rg.ops[i] for i in rg.collectives()] for rg in graph.ranks)):
        spans = [_comm_interval(op) for op in ops]
        if all(span is not None for span in spans):
            begin, end = max(spans, key=lambda span: span[0])
            out.append(end - begin)
        else:
            out.append(min(sum(_z(k.dur_us) for k in op.kernels if k.stream == Stream.COMM) for op in ops))
    return out


def replay_rank(graph: RankGraph, semantics: str, transfers: list[float] | None = None) -> list[TimedOp]:
    """The rank's ops with the trace's own times (collectives with ``transfers``, their durations without waits);
    a final op carries the measured tail of the iteration."""
    sync_host = semantics == "sync_host"
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
                             _z(k.launch_us), _z(k.gap_before_us)) for k in op.kernels)
            timed = TimedOp(t1=t1, t3=_z(op.tail_us), kernels=kernels)
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


def replay_programs(graph: TraceGraph, semantics: str) -> list[list[TimedOp]]:
    """Per rank, the replayed program of one iteration."""
    transfers = transfer_times(graph)
    return [replay_rank(rank, semantics, transfers) for rank in graph.ranks]
