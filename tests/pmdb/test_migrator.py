import duckdb
import pytest

from pmdb import migrator
from pmdb.errors import PmdbError
from pmdb.migrator import Migration


def test_shipped_migrations_are_numbered_and_document_every_table_and_column():
    known = migrator.available()
    assert [m.version for m in known] == list(range(1, len(known) + 1))
    undocumented = []
    for m in known:
        in_table, previous = False, ""
        for line in m.sql.splitlines():
            stripped = line.strip()
            if stripped.startswith("CREATE TABLE"):
                in_table = True
                if not previous.startswith("--"):
                    undocumented.append(f"{m.name}: table {stripped.split()[2]}")
            elif in_table and stripped.startswith(");"):
                in_table = False
            elif in_table and stripped and not stripped.startswith(("PRIMARY KEY", "--")) and "--" not in line:
                undocumented.append(f"{m.name}: column {stripped.split()[0]}")
            previous = stripped or previous
    assert undocumented == []


def test_migrate_from_empty_creates_every_table(tmp_path):
    conn = duckdb.connect(str(tmp_path / "a.duckdb"))
    applied = migrator.migrate(conn)
    assert [m.version for m in applied] == [m.version for m in migrator.available()]
    tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    for table in ("platforms", "collection_runs", "op_measurements", "collective_measurements",
                  "embedding_batch_stats", "workloads", "workload_runs", "e2e_measurements", "traces",
                  "trace_ops", "overheads", "overhead_samples", "model_versions", "predictions"):
        assert table in tables
    assert migrator.migrate(conn) == []  # idempotent


@pytest.mark.parametrize("start", range(1, len(migrator.available()) + 1))
def test_migrate_from_each_earlier_version_keeps_data(tmp_path, start):
    known = migrator.available()
    extra = Migration(len(known) + 1, f"{len(known) + 1:04d}_test_extra.sql",
                      "ALTER TABLE platforms ADD COLUMN test_note VARCHAR;")
    conn = duckdb.connect(str(tmp_path / "b.duckdb"))
    migrator.migrate(conn, known[:start])
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('p1', 'cpu', 'sync_host')")
    applied = migrator.migrate(conn, known + [extra])
    assert [m.version for m in applied] == list(range(start + 1, len(known) + 2))
    assert conn.execute("SELECT name, test_note FROM platforms").fetchall() == [("p1", None)]
    assert migrator.current_version(conn) == len(known) + 1


def test_newer_schema_is_refused(tmp_path):
    known = migrator.available()
    conn = duckdb.connect(str(tmp_path / "c.duckdb"))
    extra = Migration(len(known) + 1, f"{len(known) + 1:04d}_future.sql", "CREATE TABLE future (x INTEGER);")
    migrator.migrate(conn, known + [extra])
    with pytest.raises(PmdbError, match="upgrade pmdb"):
        migrator.migrate(conn, known)


def test_edited_migration_is_refused(tmp_path):
    known = migrator.available()
    conn = duckdb.connect(str(tmp_path / "d.duckdb"))
    migrator.migrate(conn, known)
    edited = [Migration(m.version, m.name, m.sql + "\n-- edited\n") if m.version == 1 else m for m in known]
    with pytest.raises(PmdbError, match="edited"):
        migrator.migrate(conn, edited)


def test_failed_migration_rolls_back(tmp_path):
    known = migrator.available()
    conn = duckdb.connect(str(tmp_path / "e.duckdb"))
    migrator.migrate(conn, known)
    bad = Migration(len(known) + 1, f"{len(known) + 1:04d}_bad.sql",
                    "CREATE TABLE half_done (x INTEGER); SELECT * FROM no_such_table;")
    with pytest.raises(duckdb.Error):
        migrator.migrate(conn, known + [bad])
    tables = {r[0] for r in conn.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert "half_done" not in tables
    assert migrator.current_version(conn) == len(known)


def test_0013_rebuilds_op_measurements_with_the_loop_state_keeping_rows_ids_and_links(tmp_path):
    """A store of the previous release (schema 12) with a measurement and its embedding statistics: after 0013
    both rows are there with their ids and link, new ids continue after them, and 'loop' is a cache state."""
    known = migrator.available()
    assert known[12].name == "0013_loop_cache_state.sql"
    conn = duckdb.connect(str(tmp_path / "c.duckdb"))
    migrator.migrate(conn, known[:12])
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('p1', 'cpu', 'sync_host')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) VALUES ('r1', 'ops', "
                 "'p1', '0', 'completed')")
    row = ("INSERT INTO op_measurements (run_id, platform, op, pass, implementation, dtype, device, cache_state, "
           "params, config_key, median_us, source) VALUES ('r1', 'p1', 'embedding_lookup', 'fwd', 'fbgemm_tbe', "
           "'float32', 'cpu', ?, '{\"B\": 2}', 'k1', ?, 'microbenchmark') RETURNING measurement_id")
    first = conn.execute(row, ["cold", 12.5]).fetchone()[0]
    with pytest.raises(duckdb.ConstraintException):
        conn.execute(row, ["loop", 9.0])
    conn.execute("INSERT INTO embedding_batch_stats (run_id, measurement_id, table_index, batch_size, num_rows, dim, "
                 "pooling_mean, reuse_factors) VALUES ('r1', ?, 0, 2, 10, 4, 1.0, ?)", [first, [0.0] * 17])
    assert [m.name for m in migrator.migrate(conn, known)][0] == "0013_loop_cache_state.sql"
    assert conn.execute("SELECT measurement_id, cache_state, median_us, source FROM op_measurements").fetchall() \
        == [(first, "cold", 12.5, "microbenchmark")]
    assert conn.execute("SELECT measurement_id FROM embedding_batch_stats").fetchall() == [(first,)]
    second = conn.execute(row, ["loop", 9.0]).fetchone()[0]
    assert second > first
    with pytest.raises(duckdb.ConstraintException):
        conn.execute(row, ["lukewarm", 9.0])
    with pytest.raises(duckdb.ConstraintException):   # the link is enforced again
        conn.execute("INSERT INTO embedding_batch_stats (run_id, measurement_id, table_index, batch_size, num_rows, "
                     "dim, pooling_mean, reuse_factors) VALUES ('r1', 99999, 0, 2, 10, 4, 1.0, ?)", [[0.0] * 17])
