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


def test_predicted_phases_sum_top_level_prices_and_gaps_per_iteration():
    diag = _module()
    events = [{"ph": "X", "args": {"phase": "fw", "predicted_us": 10.0, "t1_us": 2.0}},
              {"ph": "X", "args": {"phase": "loss", "predicted_us": 4.0, "t1_us": 1.0}},
              {"ph": "X", "args": {"phase": "bw", "predicted_us": 6.0}},
              {"ph": "X", "args": {"predicted_us": 99.0}},               # the iteration itself: no phase
              {"ph": "i", "args": {"phase": "fw", "predicted_us": 50.0}}]  # not a complete event
    phases = diag.predicted_phases({"traceEvents": events, "pmdb": {"iterations_predicted": 2}})
    assert phases == {"fw": (7.0, 1.5), "bw": (3.0, 0.0)}   # the loss counts with the forward; per iteration


def test_measured_phases_of_a_real_tiny_transformer_and_their_table():
    diag = _module()
    config = {"arch": "bert", "layers": 1, "hidden": 16, "heads": 2, "seq_len": 8, "head": "auto", "lr": 1e-4,
              "overrides": {}, "not_a_field": 1}
    measured = diag.measured_phases("transformer", config, 2, 3)
    assert set(measured) == {"zero_grad", "fw", "bw", "optimizer"}
    assert all(0 < p10 <= median for median, p10 in measured.values())
    lines = diag.phase_lines({"fw": (2000.0, 1500.0), "zero_grad": (100.0, 80.0)}, {"fw": (1000.0, 500.0)}, 3)
    assert "| forward + loss | 2.00 (1.50) | 1.00 + 0.50 | x0.75 |" in lines
    assert "| zero_grad | 0.10 (0.08) | not priced (no op) | - |" in lines


def test_a_bad_option_is_one_line(monkeypatch, tmp_path, capsys):
    import pytest

    diag = _module()
    monkeypatch.setattr("sys.argv", ["host_op_diagnosis.py", str(tmp_path), "--phases", "-1"])
    with pytest.raises(SystemExit) as stop:
        diag.main()
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--phases" in err
