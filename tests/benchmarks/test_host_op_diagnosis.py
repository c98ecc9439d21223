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


def test_gemms_are_summed_per_phase_and_by_what_ran_before_them():
    diag = _module()

    def op(ts, name, phase, predicted, traced, t1=0.0):
        return {"ph": "X", "ts": ts, "args": {"op": name, "phase": phase, "predicted_us": predicted,
                                               "traced_us": traced, "t1_us": t1}}
    events = [op(0, "aten::linear", "fw", 100.0, 150.0),
              op(1, "aten::linear", "fw", 100.0, 110.0),            # right after a GEMM
              op(2, "aten::dropout", "fw", 150.0, 160.0, t1=60.0),   # 210 µs of other work
              op(3, "aten::linear", "fw", 100.0, 300.0),            # after other work
              op(4, "aten::cross_entropy_loss", "loss", 20.0, 25.0),
              op(5, "autograd::engine::evaluate_function: AddmmBackward0", "bw", 200.0, 210.0),
              op(6, "aten::add_", "optimizer", 5.0, 6.0)]
    sums = diag.gemm_phase_sums({"traceEvents": events, "pmdb": {"iterations_predicted": 1}})
    # the first GEMM has no other work before it: it counts as right after one
    assert sums == {("fw", "right after a GEMM"): [200.0, 260.0, 2.0], ("fw", "after other work"): [100.0, 300.0, 1.0],
                    ("bw", "right after a GEMM"): [200.0, 210.0, 1.0]}
    table = diag.gemm_lines(sums)
    assert "| fw | after other work | 1 | 100 | 300 | x3.00 |" in table
    assert diag.gemm_lines({}) == [] and not diag.is_gemm("aten::add") and diag.is_gemm("aten::einsum")
