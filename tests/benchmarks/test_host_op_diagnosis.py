"""benchmarks/host_op_diagnosis.py: the profiled-iterations line of a run and the per-op sums of a timeline."""
from __future__ import annotations

from harness import load_benchmark


def _module():
    return load_benchmark("host_op_diagnosis")


def test_iterations_line_puts_each_profiled_iteration_against_the_unprofiled_step():
    diag = _module()
    line = diag.iterations_line([6866.0, 7416.0, 7221.0], 5020.5)
    assert line == "profiled iterations 6.87 / 7.42 / 7.22 ms (x 1.37 / 1.48 / 1.44 of the unprofiled step)."
    assert diag.iterations_line([], 5020.5) == "no profiled iterations stored."


def test_per_op_sums_predicted_and_traced_times_of_op_events_only():
    diag = _module()
    event = {"ph": "X", "cat": "cpu_op", "args": {"op": "aten::mm", "predicted_us": 10.0, "traced_us": 8.0}}
    trace = {"traceEvents": [event, dict(event), {"ph": "X", "cat": "user_annotation", "args": {}}],
             "pmdb": {"iterations_predicted": 1}}
    sums, meta = diag.per_op(trace)
    assert sums == {"aten::mm": [20.0, 16.0, 2]} and meta == {"iterations_predicted": 1}
