"""A store written before migration 0018 opens with the current code and keeps its rows; their backward times
stay what they were (node_us = median_us: no engine cost was measured beside them)."""
from __future__ import annotations

from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store


def test_v17_rows_keep_their_times(tmp_path):
    ws = Workspace(tmp_path / "ws")
    conn = store_before(ws, 17)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('cpu-x', 'cpu', 'sync_host')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                 "VALUES ('mb', 'ops', 'cpu-x', '0.1.0', 'completed')")
    for i, (pass_, time_us) in enumerate((("fwd", 12.0), ("bwd", 30.0))):
        conn.execute("INSERT INTO op_measurements (run_id, platform, op, pass, implementation, dtype, device, "
                     "cache_state, params, config_key, median_us, source) VALUES ('mb', 'cpu-x', 'relu', ?, "
                     "'torch', 'float32', 'cpu', 'cold', ?, ?, ?, 'microbenchmark')",
                     [pass_, '{"n": 4}', f"k{i}", time_us])
    conn.close()
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        rows = store.query("SELECT pass, median_us, engine_call_us, node_us FROM v_op_measurements ORDER BY pass")
    assert rows["median_us"].tolist() == [30.0, 12.0] and rows["node_us"].tolist() == [30.0, 12.0]
    assert rows["engine_call_us"].isna().all()
