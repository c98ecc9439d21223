"""Replay timing on hand-built two-rank graphs: a collective's duration without the wait for the late rank, and
each rank's own end (times in µs, on one trace clock)."""
from __future__ import annotations

import pytest

from simulator import semantics
from simulator.engine import simulate
from pmdb.traces.graph import Kernel, Op, RankGraph, Stream, TraceGraph
from simulator.replay import replay_programs, transfer_times


def _rank(rank: int, work_us: float, comm_us: float, consumer_at: float) -> RankGraph:
    """Compute 0..work_us, a collective called at work_us (5 µs on the thread, then on the comm thread for
    comm_us), and a 10 µs consumer of its output starting at consumer_at."""
    ops = [Op("aten::linear", start_us=0.0, cpu_dur_us=work_us, gap_before_us=0.0),
           Op("c10d::allreduce_", kernels=[Kernel(Stream.COMM, dur_us=comm_us, launch_us=0.0)],
              collective="all_reduce", start_us=work_us, cpu_dur_us=5.0, gap_before_us=0.0, tail_us=0.0),
           Op("aten::mul", waits_on=(1,), start_us=consumer_at, cpu_dur_us=10.0,
              gap_before_us=consumer_at - work_us - 5.0)]
    return RankGraph(rank, ops, measured_us=consumer_at + 10.0, start_us=0.0)


def test_transfer_starts_at_the_last_arrival_and_ends_on_each_rank():
    # rank 0 calls at 100 and its comm thread works 105..405 (waiting for rank 1 most of it); rank 1 calls at 300,
    # works 305..365; the consumers start at 406 and 366
    graph = TraceGraph([_rank(0, 100.0, 300.0, 406.0), _rank(1, 300.0, 60.0, 366.0)], "sync_host", "cpu", 1)
    assert transfer_times(graph) == [pytest.approx([100.0, 60.0])]   # from the last start (305) to each end
    res = simulate(replay_programs(graph, "sync_host"), semantics.get("sync_host"))
    # replayed: the collectives are handed over when called (100 and 300); rank 1's is the last start, so they end
    # at 300 + 100 and 300 + 60; each consumer keeps the 1 µs of its gap that the collective does not explain
    # (the wait inside it is not counted twice) and runs 10 µs: 411 and 371
    assert [r.predicted_us for r in res.ranks] == pytest.approx([411.0, 371.0])


def test_a_recorded_end_after_the_consumer_started_is_cut_there():
    # rank 1's comm event lasts 7 ms (its work object was waited for late), but its consumer started at 380
    graph = TraceGraph([_rank(0, 100.0, 300.0, 406.0), _rank(1, 300.0, 7000.0, 380.0)], "sync_host", "cpu", 1)
    assert transfer_times(graph) == [pytest.approx([100.0, 75.0])]
    res = simulate(replay_programs(graph, "sync_host"), semantics.get("sync_host"))
    assert res.predicted_us == pytest.approx(411.0)   # not 300 + 7000
