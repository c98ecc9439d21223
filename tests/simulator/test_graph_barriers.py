"""Ranks whose iterations differ only by a trailing barrier (the harness's step separator, which an execution trace
may parent to the step on one rank only) validate as the same step; other differences are still refused."""
import pytest

from pmdb.errors import PmdbError
from pmdb.traces.graph import Op, RankGraph, TraceGraph


def _rank(rank: int, *names: str) -> RankGraph:
    ops = []
    for name in names:
        collective = name if name in ("all_to_all", "all_reduce", "barrier") else None
        ops.append(Op(name=name, collective=collective))
    return RankGraph(rank, ops)


def test_trailing_barrier_on_one_rank_is_dropped_and_dependencies_renumbered():
    first = _rank(0, "all_to_all", "mm", "barrier", "all_reduce", "add", "barrier", "copy")
    first.ops[4].waits_on = (3,)    # add reads the all_reduce
    first.ops[6].waits_on = (3,)
    second = _rank(1, "all_to_all", "mm", "barrier", "all_reduce", "add", "copy")
    second.ops[4].waits_on = (3,)
    graph = TraceGraph([first, second], "sync_host").validate()
    assert [op.name for op in graph.ranks[0].ops] == ["all_to_all", "mm", "barrier", "all_reduce", "add", "copy"]
    assert graph.ranks[0].ops[5].waits_on == (3,) and graph.ranks[0].ops[4].waits_on == (3,)
    assert len(graph.ranks[1].ops) == 6     # nothing to drop there


def test_other_differences_are_still_refused():
    with pytest.raises(PmdbError, match="not of the same program step"):
        TraceGraph([_rank(0, "all_to_all", "all_reduce"), _rank(1, "all_to_all", "all_to_all")], "sync_host").validate()
