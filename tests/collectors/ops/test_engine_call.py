"""The autograd engine's own cost of a backward call, measured for real on this host's CPU."""
from __future__ import annotations

import torch

from collectors.ops.engine_call import EngineCallCost, measure_engine_call_us


def test_an_isolated_backward_costs_more_than_its_node_inside_a_chain():
    torch.set_num_threads(1)
    figures = measure_engine_call_us(reps=60)
    # a 4-element relu's node runs in a few µs inside a chain; alone, one autograd.grad call also sets up the
    # engine's graph task (~20 µs on an idle Intel Xeon, L3 480 MiB): several times the node
    assert 0 < figures["per_node"] < figures["single"]
    assert figures["call"] == figures["single"] - figures["per_node"]
    assert figures["call"] > figures["per_node"]


def test_the_cost_is_measured_once_and_again_only_when_stale():
    cost = EngineCallCost(refresh_s=3600.0, reps=20)
    first = cost.current()
    assert cost.current() == first and cost.measured == [first]   # fresh: not measured again
    cost.refresh_s = 0.0
    cost.current()
    assert len(cost.measured) == 2
