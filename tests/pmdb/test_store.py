import json
import os
import subprocess
import sys
import textwrap

import pytest

from pmdb.errors import PmdbError
from pmdb.store import Store


def _platform(store, name="p"):
    store.insert_one("platforms", {"name": name, "device_kind": "cpu", "semantics": "sync_host"})
    return name


def test_open_without_workspace_says_how_to_create(tmp_path):
    from pmdb.config import Workspace
    with pytest.raises(PmdbError, match=r"create it with `pmdb --home .*missing init`"):
        Store.open(Workspace(tmp_path / "missing"))


def test_run_lifecycle_completed_failed_interrupted(store):
    p = _platform(store)
    with store.run("ops", p, {"x": 1}) as run:
        run.summary["rows"] = 3
    with pytest.raises(ValueError):
        with store.run("ops", p):
            raise ValueError("boom\nsecond line")
    with pytest.raises(KeyboardInterrupt):
        with store.run("ops", p):
            raise KeyboardInterrupt
    rows = store.query("SELECT status, error, summary FROM collection_runs ORDER BY started_at").to_dict("records")
    assert [r["status"] for r in rows] == ["completed", "failed", "interrupted"]
    assert json.loads(rows[0]["summary"]) == {"rows": 3}
    assert rows[1]["error"] == "ValueError: boom"


def test_rows_of_unfinished_runs_do_not_count_in_views(store):
    p = _platform(store)
    base = {"platform": p, "op": "relu", "pass": "fwd", "implementation": "torch", "dtype": "float32",
            "device": "cpu", "cache_state": "warm", "params": {"B": 1}, "config_key": "k", "median_us": 1.0}
    with store.run("ops", p) as ok:
        store.insert("op_measurements", [dict(base, run_id=ok.run_id)])
    with pytest.raises(RuntimeError):
        with store.run("ops", p) as bad:
            store.insert("op_measurements", [dict(base, run_id=bad.run_id)])
            raise RuntimeError("x")
    assert store.scalar("SELECT count(*) FROM op_measurements") == 2
    assert store.scalar("SELECT count(*) FROM v_op_measurements") == 1
    assert store.scalar("SELECT params->>'$.B' FROM v_op_measurements") == "1"


def test_insert_batches_and_returning(store, monkeypatch):
    import pmdb.store as store_module
    monkeypatch.setattr(store_module, "BATCH_ROWS", 3)
    p = _platform(store)
    with store.run("comms", p) as run:
        rows = [{"run_id": run.run_id, "platform": p, "collective": "all_reduce", "backend": "gloo",
                 "world_size": 2, "split_kind": "equal", "total_bytes": 8 * i, "max_rank_bytes": 4 * i,
                 "lat_p50_us": float(i), "source": "measured", "sent_bytes": [4 * i, 4 * i]} for i in range(1, 8)]
        ids = store.insert("collective_measurements", rows, returning="collective_id")
    assert len(ids) == 7 and len(set(ids)) == 7
    assert store.scalar("SELECT sent_bytes[2] FROM collective_measurements WHERE total_bytes = 16") == 8


def _kill_mid_run(workspace):
    """Start a run in a child process that is killed (SIGKILL) while the run is 'running'."""
    code = textwrap.dedent(f"""
        import os, signal
        from pmdb.config import Workspace
        from pmdb.store import Store
        s = Store.open(Workspace({str(workspace.home)!r}))
        s.insert_one("platforms", {{"name": "p", "device_kind": "cpu", "semantics": "sync_host"}})
        run = s.start_run("ops", "p")
        s.conn.execute("CHECKPOINT")
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr


def test_killed_run_is_marked_interrupted_on_next_open(workspace):
    _kill_mid_run(workspace)
    with Store.open(workspace) as store:
        status, error = store.conn.execute("SELECT status, error FROM collection_runs").fetchone()
    assert status == "interrupted"
    assert "ended" in error


def test_second_writer_gets_a_message_naming_the_holder(workspace):
    code = textwrap.dedent(f"""
        import sys, time
        from pmdb.config import Workspace
        from pmdb.store import Store
        s = Store.open(Workspace({str(workspace.home)!r}), command="pmdb collect ops --op relu")
        print("ready", flush=True)
        sys.stdin.readline()
    """)
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        with pytest.raises(PmdbError) as info:
            Store.open(workspace)
        message = str(info.value)
        assert "pmdb collect ops --op relu" in message and f"pid {holder.pid}" in message
        assert "\n" not in message
    finally:
        holder.communicate("\n", timeout=30)
    Store.open(workspace).close()  # free again once the holder is gone


def test_nested_transactions_are_all_or_nothing(store):
    p = _platform(store)
    with pytest.raises(ValueError):
        with store.transaction():
            store.insert_one("collection_runs", {"run_id": "a", "kind": "ops", "platform": p, "status": "running",
                                                 "pmdb_version": "t"})
            with store.transaction():
                store.insert_one("collection_runs", {"run_id": "b", "kind": "ops", "platform": p,
                                                     "status": "running", "pmdb_version": "t"})
            raise ValueError("after the inner block")
    assert store.scalar("SELECT count(*) FROM collection_runs") == 0


def test_readers_see_runs_of_dead_processes_as_interrupted(workspace):
    with Store.open(workspace) as writer:
        p = _platform(writer)
        writer.insert_one("collection_runs", {"run_id": "dead", "kind": "ops", "platform": p, "status": "running",
                                              "pid": 2 ** 22 + 12345, "hostname": "elsewhere", "pmdb_version": "t"})
    with Store.open(workspace, read_only=True) as reader, Store.open(workspace, read_only=True) as second:
        assert reader.scalar("SELECT status FROM collection_runs") == "interrupted"
        assert second.scalar("SELECT count(*) FROM completed_runs") == 0
    with Store.open(workspace, read_only=True) as reader:  # the table itself is untouched by readers
        assert reader.scalar(f"SELECT status FROM \"{'pmdb'}\".main.collection_runs") == "running"


def test_views_are_created_once_and_again_when_another_release_rewrote_one(workspace):
    """Opening a store whose views are this release's recreates none; a view another release recreated (without
    this release's stamp) is replaced by a writer and shadowed by this release's for a reader."""
    import duckdb

    def views() -> dict[str, str | None]:
        with duckdb.connect(str(workspace.db_path), read_only=True) as conn:
            return dict(conn.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal "
                                     "AND NOT temporary").fetchall())
    stamped = views()
    assert len(stamped) > 10 and len(set(stamped.values())) == 1 and None not in stamped.values()
    before = workspace.db_path.read_bytes()
    Store.open(workspace).close()
    assert workspace.db_path.read_bytes() == before           # a writer's open recreated nothing
    with duckdb.connect(str(workspace.db_path)) as conn:   # what an older release's open does to one view
        conn.execute("CREATE OR REPLACE VIEW v_predictions AS SELECT 1 AS older")
    with Store.open(workspace, read_only=True) as reader:
        assert "older" not in [c[0] for c in reader.conn.execute("SELECT * FROM v_predictions").description]
    assert views()["v_predictions"] is None                 # a reader writes nothing
    Store.open(workspace).close()
    assert views() == stamped
    with Store.open(workspace, read_only=True) as reader:
        assert "prediction_id" in [c[0] for c in reader.conn.execute("SELECT * FROM v_predictions").description]
