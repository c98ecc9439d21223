"""Training phases of traced ops: the rules of pmdb.traces.phases, and graphs of a real GPU trace (param_linear, RTX
2080 Ti) split into forward, backward and optimizer ops that a model-mode prediction prices one by one."""
from __future__ import annotations

import pytest

from pmdb.traces.from_store import load_graphs
from pmdb.traces.phases import phase_of
from simulator.predict import predict_trace_set


@pytest.mark.parametrize("name, enclosing, phase", [
    ("aten::linear", ["ProfilerStep#3"], "fw"),
    ("aten::linear", ["## forward ##", "ProfilerStep#3"], "fw"),
    ("autograd::engine::evaluate_function: AddmmBackward0", ["ProfilerStep#3"], "bw"),
    ("aten::mm", ["autograd::engine::evaluate_function: AddmmBackward0"], "bw"),
    ("aten::ones_like", ["pmdb.backward"], "bw"),
    ("aten::_foreach_add_", ["Optimizer.step#SGD.step", "ProfilerStep#3"], "optimizer"),
    ("aten::zero_", ["Optimizer.zero_grad#SGD.zero_grad"], "optimizer"),
    ("aten::add_", ["pmdb.optimizer"], "optimizer"),
    ("aten::cross_entropy_loss", ["pmdb::phase::loss", "ProfilerStep#1"], "loss"),
    ("aten::linear", ["pmdb::phase::forward", "ProfilerStep#1"], "fw"),
    ("aten::mm", ["autograd::engine::evaluate_function: MmBackward0", "pmdb::phase::backward"], "bw"),
])
def test_phase_rules(name, enclosing, phase):
    assert phase_of(name, enclosing) == phase


def test_a_gpu_training_step_is_split_into_its_phases(store, gpu_trace):
    ts = gpu_trace("param_linear", "rtx")
    ops = load_graphs(store, ts, pick="best")[0].ranks[0].ops
    by_phase = {p: [op.name for op in ops if op.phase == p] for p in ("fw", "bw", "optimizer")}
    assert by_phase["fw"].count("aten::linear") == 21                 # 21 linear layers forward
    assert sum("AddmmBackward" in n for n in by_phase["bw"]) == 21   # and their gradients backward
    assert "aten::_foreach_add_" in by_phase["optimizer"]
    first_bw = next(i for i, op in enumerate(ops) if op.phase == "bw")
    assert all(op.phase != "fw" for op in ops[first_bw:])            # no forward op after the backward began
    pred = predict_trace_set(store, ts, mode="model")
    assert set(pred.phases_us) == {"fw", "bw", "optimizer"}
    assert all(v > 0 for v in pred.phases_us.values())
    # each phase alone from an idle device: never less than the whole step from an idle device (in the step, a
    # phase's host work overlaps the device tail of the phase before), and more only by those overlaps: with the
    # shipped H200 host path (today's host, faster than this RTX trace's own) this device-bound step's phases overlap ~7%
    whole, phases = pred.result.predicted_us, sum(pred.phases_us.values())
    assert whole * 0.999 <= phases <= whole * 1.10


def test_phases_are_stored_with_the_prediction(store, gpu_trace):
    """Migration 0006: the phase columns of a stored model-mode prediction."""
    from simulator.store_rows import store_prediction

    ts = gpu_trace("param_resnet", "rtx")
    pred = predict_trace_set(store, ts, mode="model")
    with store.run("predict", "rtx", {}) as run:
        pid = store_prediction(store, run.run_id, pred)
    row = store.query("SELECT predicted_fw_us, predicted_loss_us, predicted_bw_us, predicted_optimizer_us "
                      "FROM predictions WHERE prediction_id = ?", [pid]).iloc[0]
    assert row["predicted_fw_us"] == pytest.approx(pred.phases_us["fw"])
    assert row["predicted_bw_us"] == pytest.approx(pred.phases_us["bw"])
    assert row["predicted_optimizer_us"] == pytest.approx(pred.phases_us["optimizer"])
    assert row["predicted_loss_us"] != row["predicted_loss_us"]  # NaN: this trace marks no loss phase
