"""A tiny validated sharding study end to end through the CLI: capture (no trace of this structure), derive,
predict, run every plan, judge, store; then a second study of the same structure derives from that capture."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from pmdb.errors import PmdbError
from pmdb.store import Store
from shard.plans import resolve_task
from shard.predict import PlanPredictor
from shard.study import judge

pytestmark = pytest.mark.slow
SHARDERS = "naive,size_greedy,lookup_greedy"


def test_judge_applies_the_ten_percent_margin():
    predicted = {"a": 10.0, "b": 12.0, "c": 9.0}
    assert judge(predicted, {"a": 100.0, "b": 95.0, "c": 104.0}) == ("c", "b", pytest.approx(104 / 95 - 1), True)
    chosen, fastest, slowdown, ok = judge(predicted, {"a": 100.0, "b": 95.0, "c": 120.0})
    assert (chosen, fastest, ok) == ("c", "b", False) and slowdown == pytest.approx(120 / 95 - 1)


def test_missing_models_are_named(store):
    from pmdb import platform as platforms

    name = platforms.resolve(store, None)
    with pytest.raises(PmdbError, match="embedding_lookup fwd .*all_to_all at world size 2"):
        PlanPredictor(store, name, 2)


def test_tiny_validated_study_end_to_end(shard_ws, capsys):
    args = ["shard", "--tables", str(shard_ws.tiny), "--world-size", "2", "--batch-size", "32", "--sharders",
            SHARDERS, "--validate", "--rounds", "1", "--iters", "2", "--warmup", "1", "--format", "json"]
    assert shard_ws.cli(*args) == 0
    table = json.loads(capsys.readouterr().out)
    assert [r["sharder"] for r in table] and sorted(r["sharder"] for r in table) == sorted(SHARDERS.split(","))
    with Store.open(shard_ws.workspace, read_only=True) as store:
        study = store.query("SELECT * FROM v_shard_studies ORDER BY study_id DESC LIMIT 1").iloc[0]
        plans = store.query("SELECT * FROM v_shard_plans WHERE study_id = ? ORDER BY position",
                            [int(study["study_id"])])
        captured = int(study["trace_origin"].split(":")[1])
        assert study["trace_origin"].startswith("captured:") and study["capture_s"] > 0
        assert store.scalar("SELECT source FROM v_trace_sets WHERE trace_set_id = ?", [captured]) == "captured"
        assert study["batch_size"] == 32 and study["plans"] == 3
        # ranked by prediction; the chosen plan is the first, and the verdict follows the measured times
        assert plans["predicted_us"].is_monotonic_increasing and study["chosen"] == plans["sharder"].iloc[0]
        measured = dict(zip(plans["sharder"], plans["measured_us"]))
        chosen, fastest, slowdown, ok = judge(dict(zip(plans["sharder"], plans["predicted_us"])), measured)
        assert (study["chosen"], study["fastest"], bool(study["success"])) == (chosen, fastest, ok)
        assert study["chosen_slowdown"] == pytest.approx(slowdown)
        assert (plans["measured_us"] > 0).all() and plans["measured_runs"].map(len).eq(1).all()
        # each plan's prediction is stored on a derived trace set named after the plan, with its parent (the capture)
        # and its model versions; validated, it is judged against the plan's measured runs and belongs to the plan's
        # workload, so the E2E error views (the report's Fig. 10/11) list it; `pmdb predict` never picks it (derived)
        preds = store.query("SELECT p.prediction_id, p.measured_us, p.workload_run_id, t.source, t.label, "
                            "t.parent_trace_set_id, w.sharder FROM predictions p JOIN trace_sets t "
                            "USING (trace_set_id) JOIN workloads w USING (workload_id) WHERE p.prediction_id IN "
                            "(SELECT unnest(?::BIGINT[]))", [plans["prediction_id"].astype(int).tolist()])
        assert len(preds) == 3 and set(preds["source"]) == {"derived"} and (preds["parent_trace_set_id"] == captured).all()
        assert sorted(label.split()[1] for label in preds["label"]) == sorted(SHARDERS.split(","))
        assert sorted(preds["sharder"]) == sorted(SHARDERS.split(","))
        judged = dict(zip(preds["sharder"], preds["measured_us"]))
        assert all(judged[s] == pytest.approx(m) for s, m in measured.items())
        assert store.scalar("SELECT count(*) FROM v_prediction_errors WHERE prediction_id IN "
                            "(SELECT unnest(?::BIGINT[]))", [plans["prediction_id"].astype(int).tolist()]) == 3
        used = store.query("SELECT name, sum(ops_predicted) AS n FROM prediction_models WHERE prediction_id = ? "
                           "GROUP BY name", [int(plans["prediction_id"].iloc[0])])
        lookups = used[used["name"].str.contains("embedding_lookup")]
        assert lookups["n"].sum() >= 4   # forward and backward lookup of both ranks
        assert used["name"].str.contains("all_to_all").any()
        task = resolve_task(store, tables_file=shard_ws.tiny, world_size=2, batch_size=32)
        loads = json.loads(plans["loads"].iloc[0])
        assert sorted(t for r in loads for t in r["tables"]) == list(range(task.num_tables))
        traces_before = store.scalar("SELECT count(*) FROM v_trace_sets WHERE source = 'captured'")

    # the same structure again, without ground truth: derived from the capture, nothing runs
    assert shard_ws.cli("shard", "--tables", str(shard_ws.tiny), "--world-size", "2", "--batch-size", "32",
                        "--sharders", "naive,size_lookup_greedy") == 0
    capsys.readouterr()
    with Store.open(shard_ws.workspace, read_only=True) as store:
        again = store.query("SELECT * FROM v_shard_studies ORDER BY study_id DESC LIMIT 1").iloc[0]
        assert again["trace_origin"] == f"derived-from:{captured}"
        assert pd.isna(again["capture_s"]) and pd.isna(again["success"]) and pd.isna(again["validate_s"])
        assert store.scalar("SELECT count(*) FROM v_trace_sets WHERE source = 'captured'") == traces_before


def test_study_over_random_heavy_tasks_resumes(shard_ws, capsys):
    args = ["shard", "--study", "--count", "1", "--seed", "3", "--batch-size", "16", "--max-rows", "2000", "--dim",
            "8", "--sharders", "naive,size_greedy", "--rounds", "1", "--iters", "1", "--warmup", "1"]
    assert shard_ws.cli(*args) == 0
    first = capsys.readouterr().out
    with Store.open(shard_ws.workspace, read_only=True) as store:
        study = store.query("SELECT * FROM v_shard_studies WHERE series LIKE 'heavy ws2 b16 seed3%'")
        assert len(study) == 1 and study["success"].notna().all() and study["validate_s"].iloc[0] > 0
        task = store.query("SELECT * FROM tasks WHERE task_id = ?", [int(study["task_id"].iloc[0])]).iloc[0]
        tables = json.loads(task["tables"])
        assert task["kind"] == "heavy" and all(t["pooling"] >= 20 and t["num_rows"] <= 2000 for t in tables)
        assert study["num_tables"].iloc[0] == len(tables)
        series = study["series"].iloc[0]
        assert "models=" in series and series in first and "success_rate_pct" in first
    assert shard_ws.cli(*args) == 0   # the same experiment again: the finished task is not run twice
    again = capsys.readouterr().out
    assert "(1 from earlier runs)" in again
    with Store.open(shard_ws.workspace, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM v_shard_studies WHERE series = ?", [series]) == 1
