"""A store written before migration 0020 opens with the current code and keeps its overhead table: its samples get
no size class (NULL), it has no per-class rows, and the simulator prices its ops by name as before."""
from __future__ import annotations

from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store
from simulator.model_set import Overheads


def test_v19_overheads_keep_their_rows_and_price_by_name(tmp_path):
    ws = Workspace(tmp_path / "ws")
    conn = store_before(ws, 19)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('cpu-x', 'cpu', 'sync_host')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                 "VALUES ('t', 'trace', 'cpu-x', '0.1.0', 'completed'), "
                 "('o', 'overheads', 'cpu-x', '0.1.0', 'completed')")
    conn.execute("INSERT INTO trace_sets (run_id, platform, world_size, source) VALUES ('t', 'cpu-x', 1, 'captured')")
    conn.execute("INSERT INTO traces (run_id, trace_set_id, rank, kind, sha256, path) "
                 "VALUES ('t', 1, 0, 'kineto', 'x', 'k.json')")
    conn.execute("INSERT INTO overhead_versions (overhead_version, run_id, platform, semantics, trace_ids) "
                 "VALUES (1, 'o', 'cpu-x', 'sync_host', [1])")
    conn.execute("INSERT INTO overhead_samples VALUES (1, 1, 'aten::all', 'T3', 7, 313.0), (1, 1, 'aten::all', 'T3', "
                 "9, 3.0)")
    conn.execute("INSERT INTO overheads VALUES (1, 'aten::all', 'T3', 158.0, 219.2, 2)")
    conn.close()
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        samples = store.query("SELECT value_us, size_class FROM overhead_samples ORDER BY op_id")
        assert samples["value_us"].tolist() == [313.0, 3.0] and samples["size_class"].isna().all()
        assert store.scalar("SELECT count(*) FROM overhead_sizes") == 0
        overheads = Overheads.latest(store, "cpu-x")
    assert overheads.version == 1 and not overheads.sized
    assert overheads.get("aten::all", "T3") == overheads.get("aten::all", "T3", 4) == 158.0
