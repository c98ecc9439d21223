"""The op-coverage summary: filled by its migration from the rows a previous release stored, refreshed by every run
that completes (only the groups it wrote), untouched by failed runs, and equal to a fresh aggregation."""
from __future__ import annotations

import duckdb
import pytest

from pmdb import migrator, op_coverage
from pmdb.cli.core import named_queries
from pmdb.config import Workspace
from pmdb.store import Store


def _rows(conn, run_id: str, op: str, n: int, *, cache: str = "warm", skipped: bool = False, base: float = 10.0):
    for i in range(n):
        conn.execute(
            "INSERT INTO op_measurements (run_id, platform, op, pass, implementation, dtype, device, cache_state, "
            "params, config_key, median_us, mean_us, std_us, min_us, repetitions, warmup, threads, skipped) "
            "VALUES (?, 'cpu-x', ?, 'fwd', 'torch', 'float32', 'cpu', ?, '{}', ?, ?, ?, ?, ?, 3, 1, 2, ?)",
            [run_id, op, cache, f"k{i % 3}", None if skipped else base + i, None if skipped else base + i,
             None if skipped else 0.1 * (i + 1), None if skipped else base + i - 0.5,
             "memory cap" if skipped else None])


def _coverage(store: Store) -> dict[tuple[str, str], dict]:
    frame = store.query(named_queries()["op_coverage"][1])
    return {(r["op"], r["cache_state"]): r for r in frame.to_dict("records")}


def test_migration_fills_the_summary_from_a_previous_store(tmp_path):
    ws = Workspace(tmp_path / "ws")
    ws.create_dirs()
    conn = duckdb.connect(str(ws.db_path))
    migrator.migrate(conn, [m for m in migrator.available() if m.version < _summary_version()])
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('cpu-x', 'cpu', 'sync_host')")
    for run_id, status in (("done", "completed"), ("cut", "interrupted")):
        conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                     "VALUES (?, 'ops', 'cpu-x', '0.1.0', ?)", [run_id, status])
    _rows(conn, "done", "relu", 5)
    _rows(conn, "done", "relu", 2, skipped=True)
    _rows(conn, "cut", "relu", 4)
    _rows(conn, "cut", "gelu", 4)
    conn.close()
    with Store.open(ws) as store:
        assert store.scalar("SELECT count(*) FROM op_measurements") == 15  # every row kept
        cov = _coverage(store)
        assert set(cov) == {("relu", "warm")}  # the interrupted run's rows never count
        relu = cov[("relu", "warm")]
        assert (relu["rows"], relu["configs"], relu["skipped"], relu["min_us"], relu["max_us"]) == (5, 3, 2, 10, 14)
        assert op_coverage.stale_groups(store.conn) == 0


def _summary_version() -> int:
    return next(m.version for m in migrator.available() if m.name.endswith("op_coverage_summary.sql"))


def test_completed_runs_refresh_their_groups_and_failed_runs_change_nothing(tmp_path):
    ws = Workspace(tmp_path / "ws")
    with Store.open(ws, create=True) as store:
        store.conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('cpu-x', 'cpu', 'sync_host')")
        with store.run("ops", "cpu-x", {}) as run:
            _rows(store.conn, run.run_id, "relu", 4)
            assert _coverage(store) == {}  # rows of a running run do not count yet
        assert _coverage(store)[("relu", "warm")]["rows"] == 4
        with pytest.raises(RuntimeError):
            with store.run("ops", "cpu-x", {}) as run:
                _rows(store.conn, run.run_id, "relu", 6, base=1.0)
                _rows(store.conn, run.run_id, "gelu", 3)
                raise RuntimeError("the sweep failed")
        cov = _coverage(store)
        assert set(cov) == {("relu", "warm")} and cov[("relu", "warm")]["rows"] == 4
        with store.run("ops", "cpu-x", {}) as run:  # a second completed run adds to the same group
            _rows(store.conn, run.run_id, "relu", 3, base=2.0)
            _rows(store.conn, run.run_id, "relu", 2, cache="cold")
        cov = _coverage(store)
        assert cov[("relu", "warm")]["rows"] == 7 and cov[("relu", "warm")]["min_us"] == 2.0
        assert cov[("relu", "cold")]["rows"] == 2
        with store.run("predict", "cpu-x", {}):  # a run without op rows leaves the summary as it was
            pass
        assert op_coverage.stale_groups(store.conn) == 0
        store.conn.execute("DELETE FROM op_coverage_summary")
        assert op_coverage.stale_groups(store.conn) == 2  # the check sees a summary that disagrees
        assert op_coverage.rebuild(store.conn) == 2 and op_coverage.stale_groups(store.conn) == 0
