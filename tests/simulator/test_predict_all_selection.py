"""What `pmdb predict --all` picks: imported trace sets too (on the platform they were recorded on), never derived
ones, and anything predicted under other simulator rules again. A real one-rank MLP recording, imported as a trace
of another CPU and captured here as a workload's trace."""
from __future__ import annotations

import json

from collectors.traces.ingest import RankTraces
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.store import Store
from sim_store import ingest
from simulator.pending import pending_imports, pending_runs
from simulator.predict import predict_and_store
from simulator.semantics import RULES_VERSION


def _ranks(files):
    return [RankTraces(0, files["kineto"], files["et"])]


def test_predict_all_predicts_imported_trace_sets_once(workspace, mlp_trace_files, capsys):
    with Store.open(workspace) as store:
        elsewhere = platforms.ensure_named(store, "cpu-elsewhere", device_kind="cpu")
        ts = ingest(store, elsewhere, _ranks(mlp_trace_files), "imported mlp", "imported")
        assert [(p.trace_set_id, p.platform) for p in pending_imports(store, None)] == [(ts, elsewhere)]
        assert pending_imports(store, "cpu-nowhere-else") == []
    home = ["--home", str(workspace.home)]
    assert main([*home, "predict", "--all", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["trace_set"], r["target"], r["workload_run"]) for r in rows] == [(ts, elsewhere, None)]
    assert rows[0]["predicted_ms"] > 0
    assert main([*home, "predict", "--all"]) == 0
    assert "every imported trace set, is predicted with the current models" in capsys.readouterr().out
    with Store.open(workspace) as store:
        # a prediction made under other rules (or before they were recorded) is not current
        store.conn.execute("UPDATE predictions SET rules_version = ?", [RULES_VERSION - 1])
        assert [p.trace_set_id for p in pending_imports(store, None)] == [ts]
        store.conn.execute("UPDATE predictions SET rules_version = NULL")
        assert [p.trace_set_id for p in pending_imports(store, elsewhere)] == [ts]
        store.conn.execute("UPDATE predictions SET rules_version = ?", [RULES_VERSION])
        assert pending_imports(store, None) == []


def test_workload_runs_are_predicted_again_under_new_rules(store, mlp_trace_files):
    platform = platforms.resolve(store, None)
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "other", "name": "mlp", "config": {}, "config_hash": "mlp",
                                             "batch_size": 8, "world_size": 1}, returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 3, "warmup": 1, "measured_us": 500.0})
    truth = run.run_id
    ts = ingest(store, platform, _ranks(mlp_trace_files), "mlp", "captured", workload_id=wid)
    assert pending_runs(store, platform) == [truth] and pending_imports(store, None) == []   # captured, not imported
    with store.run("predict", platform, {}) as run:
        pid, pred = predict_and_store(store, run.run_id, workload_run_id=truth)
    assert pred.trace_set_id == ts
    assert store.scalar("SELECT rules_version FROM predictions WHERE prediction_id = ?", [pid]) == RULES_VERSION
    assert pending_runs(store, platform) == []
    store.conn.execute("UPDATE predictions SET rules_version = ? WHERE prediction_id = ?", [RULES_VERSION + 1, pid])
    assert pending_runs(store, platform) == [truth]
