"""Migration 0015 on a store of the previous release (schema 14): every row kept; a CUDA row timed by `collect ops`
as one call between events is marked 'single_call' with that time beside it, and no longer counts as a kernel time
(v_op_measurements); CPU, imported and trace rows are untouched."""
import duckdb

from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store


def test_0015_marks_single_call_cuda_rows_and_keeps_every_row(tmp_path):
    known = migrator.available()
    assert known[14].name == "0015_op_device_time.sql"
    ws = Workspace(tmp_path / "ws")
    ws.home.mkdir(parents=True)
    conn = duckdb.connect(str(ws.db_path))
    migrator.migrate(conn, known[:14])
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('g', 'cuda', 'async_device'), "
                 "('c', 'cpu', 'sync_host')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) VALUES "
                 "('r1', 'ops', 'g', '0', 'completed'), ('r2', 'import-ops', 'g', '0', 'completed'), "
                 "('r3', 'ops', 'c', '0', 'completed')")
    rows = [("r1", "g", "cuda:0", "device", "k1", 23.8, "microbenchmark"),
            ("r2", "g", "cuda:0", "device", "k2", 40.0, "import"),
            ("r3", "c", "cpu", "cold", "k3", 12.5, "microbenchmark")]
    for run, platform, device, cache, key, median, source in rows:
        conn.execute("INSERT INTO op_measurements (run_id, platform, op, pass, implementation, dtype, device, "
                     "cache_state, params, config_key, median_us, source) VALUES (?, ?, 'relu', 'fwd', 'torch', "
                     "'float32', ?, ?, '{\"M\": 1}', ?, ?, ?)", [run, platform, device, cache, key, median, source])
    conn.close()
    with Store.open(ws) as store:  # applies 0015 (and whatever follows it)
        got = store.conn.execute("SELECT config_key, median_us, device_timing, single_call_us, back_to_back_us "
                                 "FROM op_measurements ORDER BY config_key").fetchall()
        counted = [k for (k,) in store.conn.execute(
            "SELECT config_key FROM v_op_measurements ORDER BY config_key").fetchall()]
    assert [(k, m) for k, m, *_ in got] == [("k1", 23.8), ("k2", got[1][1]), ("k3", 12.5)]  # rows kept
    assert got[0][2:] == ("single_call", 23.8, None)
    assert got[1][2] is None and got[2][2:] == (None, None, None)
    assert counted == ["k2", "k3"]
