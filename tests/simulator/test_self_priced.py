"""A model-mode prediction without models keeps the traced time of every op: replay, not a model. It is stored with
its self-priced share, named in one warning line and left out of the model error tables (issue #38, item 1). Real
shared GPU trace (param_linear), real store."""
from __future__ import annotations

from simulator.error_stats import e2e_errors, self_priced_note
from simulator.predict import predict_and_store


def test_a_prediction_without_models_is_self_priced_and_not_a_model_result(store, gpu_trace, capsys):
    trace_set = gpu_trace("param_linear", "gpu-fresh")
    with store.run("predict", "gpu-fresh", {}) as run:
        pid, pred = predict_and_store(store, run.run_id, trace_set_id=trace_set, mode="model")
    assert not pred.models and pred.self_priced_share > 0.9
    assert "kept its traced time" in capsys.readouterr().err
    row = store.query("SELECT self_priced_share, self_priced, abs_error FROM v_prediction_errors "
                      "WHERE prediction_id = ?", [pid]).iloc[0]
    assert row["self_priced"] and row["self_priced_share"] == pred.self_priced_share
    assert e2e_errors(store, mode="model").empty                         # not among model-mode results
    assert "1 model-mode prediction left out" in self_priced_note(store)
    with store.run("predict", "gpu-fresh", {}) as run:
        replay_id, _ = predict_and_store(store, run.run_id, trace_set_id=trace_set, mode="replay")
    assert store.scalar("SELECT self_priced FROM v_prediction_errors WHERE prediction_id = ?", [replay_id]) is False
    assert e2e_errors(store, mode="replay")["n"].tolist() == [1]       # replay stays replay's own statistic
