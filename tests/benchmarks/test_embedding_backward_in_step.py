"""benchmarks/embedding_backward_in_step.py: a real (small) DLRM's fused lookup backward timed inside real steps and
in the loop states, and its price read from a predicted timeline."""
from __future__ import annotations

from harness import load_benchmark

SMALL = {"name": "small", "bottom_mlp": [16, 8], "top_mlp": [16, 1], "batch_size": 32,
         "tables": [{"num_rows": 500, "dim": 8, "pooling": 3}, {"num_rows": 200, "dim": 8, "pooling": 5}]}


def test_every_state_times_the_backward_of_each_round():
    eb = load_benchmark("embedding_backward_in_step")
    times = eb.measure_run(SMALL, 32, 3)
    assert list(times) == list(eb.STATES)
    assert all(len(v) == 3 and all(us > 0 for us in v) for v in times.values())


def test_the_price_is_the_backward_node_of_one_iteration():
    eb = load_benchmark("embedding_backward_in_step")
    node = "autograd::engine::evaluate_function: torch::autograd::CppNode<SplitLookupFunction_sgd_Op_pt2>"
    events = [{"ph": "X", "name": name, "args": {"op": name, "predicted_us": us, "phase": phase, "iteration": it}}
              for it in (0, 1) for name, us, phase in ((node, 800.0 + it * 100, "bw"), ("aten::mm", 50.0, "bw"))]
    trace = {"traceEvents": events, "pmdb": {"iterations_predicted": 2}}
    assert eb.predicted_backward_us(trace) == 850.0   # per iteration: the node's prices over the two
    assert eb.predicted_backward_us({"traceEvents": [e for e in events if e["name"] == "aten::mm"]}) is None
