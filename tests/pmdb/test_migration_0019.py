"""A store written before migration 0019 opens with the current code and keeps its predictions; they have no
spec-only range (NULL range columns), and `pmdb errors` still reads them."""
from __future__ import annotations

from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store


def test_v18_predictions_keep_their_rows_without_a_range(tmp_path):
    ws = Workspace(tmp_path / "ws")
    conn = store_before(ws, 18)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('gpu-x', 'cuda', 'async_device')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                 "VALUES ('p', 'predict', 'gpu-x', '0.1.0', 'completed')")
    conn.execute("INSERT INTO trace_sets (run_id, platform, world_size, source) VALUES ('p', 'gpu-x', 1, 'imported')")
    conn.execute("INSERT INTO predictions (run_id, trace_set_id, source_platform, target_platform, mode, "
                 "predicted_us, measured_us) VALUES ('p', 1, 'gpu-x', 'gpu-x', 'model', 1100.0, 1000.0)")
    conn.close()
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        row = store.query("SELECT predicted_us, rel_error, range_low_us, range_high_us, range_detail "
                          "FROM v_predictions").iloc[0]
    assert row["predicted_us"] == 1100.0 and abs(row["rel_error"] - 0.1) < 1e-12
    assert row[["range_low_us", "range_high_us", "range_detail"]].isna().all()
