"""Zero shares on graphs: matched to the optimizer step's sqrt ops in parameter order (never to a forward sqrt),
and, in a what-if, falling as share ** k when the global batch grows k times."""
from __future__ import annotations

from pmdb.platform import Semantics
from pmdb.traces.graph import Op, RankGraph, TraceGraph
from pmdb.traces.state_values import annotate, scaled
from simulator.whatif import scale_zero_shares


def _graph() -> TraceGraph:
    forward = Op("aten::sqrt", input_shapes=[[100, 8]], phase="fw")
    roots = [Op("aten::sqrt", input_shapes=[[100, 8]]), Op("aten::sqrt", input_shapes=[[8]]),
             Op("aten::sqrt", input_shapes=[[8, 100]])]
    step = Op("Optimizer.step#AdamW.step", phase="optimizer",
              sub=[Op("aten::lerp_", input_shapes=[[100, 8]]), *roots])
    return TraceGraph([RankGraph(0, [forward, step])], Semantics.SYNC_HOST)


def test_optimizer_sqrt_ops_take_their_states_share_in_parameter_order():
    graph = _graph()
    # parameters: an embedding [100, 8] (90% zero rows), a bias [8], a projection [8, 100] of the same size (no zeros)
    assert annotate(graph, {0: [(800, 0.904), (8, 0.0), (800, 0.0)], 1: [(800, 1.0)]}) == 3
    forward, step = graph.ranks[0].ops
    assert forward.zero_frac == 0.0                                  # not the optimizer's
    assert [op.zero_frac for op in step.sub[1:]] == [0.9, 0.0, 0.0]
    assert step.sub[0].zero_frac == 0.0                              # lerp_ reads the state but costs the same
    assert annotate(_graph(), {}) == 0


def test_what_if_batch_lowers_the_share_geometrically():
    graph = _graph()
    annotate(graph, {0: [(800, 0.9), (8, 0.0), (800, 0.0)]})
    assert scale_zero_shares(graph, 2.0) == 1
    assert graph.ranks[0].ops[1].sub[1].zero_frac == 0.81            # 0.9 ** 2: twice the samples per step
    assert scaled(0.81, 0.5) == 0.9 and scaled(0.5, 0.0) == 0.0 and scaled(0.004, 1.0) == 0.0
