"""`pmdb export` and `pmdb merge` between two real workspaces, each holding small real collections: a kernel
sweep, an imported trace (recorded by the collector's own profiled passes), its overhead table, a replay prediction
and a shape-only transformer capture (the same workload in both stores)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import duckdb
import pytest

import collectors.workloads.profile  # noqa: F401  (the real packages first: tests/ has folders of the same names)
from pmdb import migrator
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.exchange import sha256_file
from pmdb.exchange_schema import NOT_EXCHANGED, read_schema
from pmdb.store import Store

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

TINY_GPT2 = {"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 64, "n_positions": 16,
             "bos_token_id": 0, "eos_token_id": 0}


def pmdb(home: Path, *args: str) -> int:
    return main(["--home", str(home), *map(str, args)])


def one_line_error(capsys, code: int, text: str) -> None:
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(err) == 1 and err[0].startswith("pmdb: error: ") and text in err[0], err


def counts(home: Path) -> dict[str, int]:
    """Rows per base table, read straight from the file."""
    with duckdb.connect(str(home / "pmdb.duckdb"), read_only=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary")
                  .fetchall()]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


def query(home: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(home / "pmdb.duckdb"), read_only=True) as conn:
        return conn.execute(sql).fetchall()


@pytest.fixture(scope="module")
def homes(tmp_path_factory, cpu_passes, mlflow_template) -> dict[str, Path]:
    """Workspaces A and B with real collections; tests copy them before changing them. Each gets a copy of the
    run's empty MLflow store (:func:`mlflow_template`; creating one is tested in tests/faults) after `init`."""
    root = tmp_path_factory.mktemp("exchange")
    passes = cpu_passes
    config = root / "tiny_gpt2.json"
    config.write_text(json.dumps(TINY_GPT2))
    out = {}
    for name, op, kineto, et, extra in (("A", "tril", "kineto", "et", []),
                                        ("B", "relu", "joint_kineto", "joint_et", ["--include-joint"])):
        home = out[name] = root / name
        steps = [["init"],
                 ["collect", "ops", "--no-peaks", "--no-progress", "--op", op, "--sweep", "quick",
                  "--max-configs", "2", "--cache", "warm"],
                 ["collect", "trace", "--kineto", passes[kineto], "--et", passes[et]],
                 ["fit", "overheads", *extra],
                 ["predict", "--trace-set", "1", "--mode", "replay"],
                 ["collect", "workload", "transformer", "--graph-only", "--config", config, "--batch-size", "2",
                  "--seq-len", "8"]]
        for step in steps:
            assert pmdb(home, *step) == 0, step
            if step == ["init"]:
                shutil.copy(mlflow_template.mlflow_db, home / "mlflow.db")
    out["passes"] = passes
    return out


@pytest.fixture
def b_copy(homes, tmp_path) -> Path:
    target = tmp_path / "B"
    shutil.copytree(homes["B"], target)
    return target


def test_every_table_has_a_place(workspace):
    with Store.open(workspace) as store:
        schema = read_schema(store.conn)
        tables = {t for (t,) in store.conn.execute("SELECT table_name FROM duckdb_tables()").fetchall()}
    assert set(schema.order) == tables - set(NOT_EXCHANGED)
    assert schema.owner["trace_ops"].target == "traces" and schema.owner["overheads"].target == "overhead_versions"
    assert schema.ids["traces"] == ("trace_id", "seq_trace_id")


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_export_then_merge_adds_up_and_merging_twice_adds_nothing(homes, b_copy, tmp_path, capsys):
    a = homes["A"]
    out = tmp_path / "export-a"
    assert pmdb(a, "export", out) == 0
    assert capsys.readouterr().out.startswith("exported 5 runs on cpu-")
    manifest = json.loads((out / "manifest.json").read_text())
    completed = {r for (r,) in query(a, "SELECT run_id FROM collection_runs WHERE status = 'completed'")}
    assert set(manifest["run_ids"]) == completed and manifest["dependency_run_ids"] == []
    assert manifest["schema_version"] == len(migrator.available()) and manifest["pmdb_version"]
    assert "MLflow" in manifest["not_exported"]
    for rel, entry in manifest["files"].items():
        assert sha256_file(out / rel) == entry["sha256"], rel
        if rel.startswith("tables/"):
            assert query(a, f"SELECT count(*) FROM read_parquet('{out / rel}')")[0][0] == entry["rows"]
    traces = [rel for rel in manifest["files"] if rel.startswith("artifacts/traces/")]
    assert len(traces) == 3  # Kineto + ET of the imported trace, ET of the capture
    new_files = [rel for rel in traces if not (b_copy / rel).exists()]

    before, in_a = counts(b_copy), counts(a)
    assert pmdb(b_copy, "merge", out) == 0
    said = capsys.readouterr().out
    assert said.startswith("merged 5 runs: ") and "op_measurements +4" in said
    assert f"; {len(new_files)} trace files" in said and all((b_copy / rel).is_file() for rel in new_files)
    after = counts(b_copy)
    shared = {"platforms", "workloads"}  # the same machine and the same captured workload in both stores
    for table in set(before) - set(NOT_EXCHANGED) - shared:
        assert after[table] == before[table] + in_a[table], table
    assert after["platforms"] == before["platforms"] == 1 and after["workloads"] == before["workloads"] == 1
    # ids were remapped and every reference followed: A's rows hang off the same things as in A
    per_trace = "SELECT t.run_id, t.sha256, count(o.op_id) FROM traces t LEFT JOIN trace_ops o USING (trace_id) " \
                "WHERE t.run_id IN (SELECT run_id FROM collection_runs WHERE kind = '{}') GROUP BY ALL ORDER BY ALL"
    assert set(query(a, per_trace.format("trace"))) <= set(query(b_copy, per_trace.format("trace")))
    uses = "SELECT v.run_id, list(t.sha256 ORDER BY t.sha256) FROM overhead_versions v, unnest(v.trace_ids) u(i) " \
           "JOIN traces t ON t.trace_id = u.i GROUP BY ALL"
    assert set(map(str, query(a, uses))) <= set(map(str, query(b_copy, uses)))
    predicted = "SELECT p.run_id, s.run_id, s.label FROM predictions p JOIN trace_sets s USING (trace_set_id)"
    assert set(query(a, predicted)) <= set(query(b_copy, predicted))
    assert query(b_copy, "SELECT count(DISTINCT workload_id) FROM trace_sets WHERE workload_id IS NOT NULL") == [(1,)]
    for (rel,) in query(b_copy, "SELECT path FROM traces"):
        assert (b_copy / rel).is_file()
    assert query(b_copy, "SELECT count(*) FROM v_op_measurements")[0][0] == before["op_measurements"] + 4
    summary = "SELECT sum(rows) + sum(skipped) FROM op_coverage_summary"  # merged rows count in the coverage too
    assert query(b_copy, summary)[0][0] == query(b_copy, "SELECT count(*) FROM op_measurements m JOIN "
                                                         "collection_runs r USING (run_id) WHERE status = 'completed'")[0][0]

    assert pmdb(b_copy, "merge", out) == 0
    assert capsys.readouterr().out.strip() == "merged 0 runs (5 already here): nothing added"
    assert counts(b_copy) == after


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_merging_a_workspace_directly_equals_merging_its_export(homes, b_copy, tmp_path, capsys):
    a = homes["A"]
    untouched = sha256_file(a / "pmdb.duckdb")
    assert pmdb(b_copy, "merge", a) == 0
    assert capsys.readouterr().out.startswith("merged 5 runs: ")
    assert sha256_file(a / "pmdb.duckdb") == untouched
    via_export = tmp_path / "B2"
    shutil.copytree(homes["B"], via_export)
    assert pmdb(a, "export", tmp_path / "ex") == 0 and pmdb(via_export, "merge", tmp_path / "ex") == 0
    assert counts(b_copy) == counts(via_export)
    assert not list((b_copy / "artifacts" / "tmp").iterdir())  # the temporary export and staging store are gone
    assert pmdb(b_copy, "merge", a / "pmdb.duckdb") == 0
    assert "merged 0 runs (5 already here)" in capsys.readouterr().out


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_a_damaged_or_newer_export_is_refused_and_nothing_is_added(homes, b_copy, tmp_path, capsys):
    out = tmp_path / "export-a"
    assert pmdb(homes["A"], "export", out) == 0
    before, files = counts(b_copy), sorted((b_copy / "artifacts" / "traces").iterdir())
    tampered = tmp_path / "tampered"
    shutil.copytree(out, tampered)
    table = tampered / "tables" / "op_measurements.parquet"
    with duckdb.connect() as conn:  # a valid Parquet file with other numbers
        conn.execute(f"COPY (SELECT * REPLACE (median_us * 2 AS median_us) FROM read_parquet('{table}')) "
                     f"TO '{table}.new' (FORMAT parquet)")
    Path(f"{table}.new").replace(table)
    capsys.readouterr()
    one_line_error(capsys, pmdb(b_copy, "merge", tampered), "op_measurements.parquet does not match its sha256")
    newer = tmp_path / "newer"
    shutil.copytree(out, newer)
    manifest = json.loads((newer / "manifest.json").read_text())
    (newer / "manifest.json").write_text(json.dumps({**manifest, "schema_version": 999}))
    one_line_error(capsys, pmdb(b_copy, "merge", newer), "has schema version 999 but this pmdb knows only up to")
    missing = tmp_path / "missing"
    shutil.copytree(out, missing)
    next((missing / "artifacts" / "traces").iterdir()).unlink()
    one_line_error(capsys, pmdb(b_copy, "merge", missing), "is missing from the export: nothing merged")
    one_line_error(capsys, pmdb(b_copy, "merge", tmp_path), "neither a pmdb export")
    assert counts(b_copy) == before and sorted((b_copy / "artifacts" / "traces").iterdir()) == files


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_a_run_here_with_other_content_refuses_the_merge(homes, b_copy, tmp_path, capsys):
    out = tmp_path / "export-a"
    assert pmdb(homes["A"], "export", out) == 0 and pmdb(b_copy, "merge", out) == 0
    run_id = query(homes["A"], "SELECT run_id FROM collection_runs WHERE kind = 'ops'")[0][0]
    with duckdb.connect(str(b_copy / "pmdb.duckdb")) as conn:
        conn.execute("DELETE FROM op_measurements WHERE measurement_id = (SELECT max(measurement_id) FROM "
                     "op_measurements WHERE run_id = ?)", [run_id])
    before = counts(b_copy)
    capsys.readouterr()
    one_line_error(capsys, pmdb(b_copy, "merge", out),
                   f"run {run_id} is in this store with different content (op_measurements: 3 rows here, 4 in")
    assert counts(b_copy) == before


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_a_file_imported_here_already_skips_its_run_and_the_runs_built_on_it(homes, b_copy, tmp_path, capsys):
    passes = homes["passes"]
    assert pmdb(b_copy, "collect", "trace", "--kineto", passes["kineto"], "--et", passes["et"]) == 0
    before = counts(b_copy)
    capsys.readouterr()
    assert pmdb(b_copy, "merge", homes["A"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("merged 2 runs: ") and said.count("\nskipped run ") == 3
    assert "its imported file" in said and "it depends on skipped run" in said
    after = counts(b_copy)
    assert after["op_measurements"] == before["op_measurements"] + 4 and after["traces"] == before["traces"] + 1
    assert after["predictions"] == before["predictions"] and after["imported_files"] == before["imported_files"]


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_export_choices_and_failures_leave_nothing(homes, tmp_path, capsys):
    a = homes["A"]
    ops_run = query(a, "SELECT run_id FROM collection_runs WHERE kind = 'ops'")[0][0]
    predict_run = query(a, "SELECT run_id FROM collection_runs WHERE kind = 'predict'")[0][0]
    assert pmdb(a, "export", tmp_path / "one", "--run", ops_run) == 0
    manifest = json.loads((tmp_path / "one" / "manifest.json").read_text())
    assert manifest["run_ids"] == [ops_run] and manifest["files"]["tables/trace_ops.parquet"]["rows"] == 0
    assert pmdb(a, "export", tmp_path / "pred", "--run", predict_run) == 0  # brings the trace run it predicted
    manifest = json.loads((tmp_path / "pred" / "manifest.json").read_text())
    assert [r["kind"] for r in manifest["runs"]] == ["predict", "trace"]
    capsys.readouterr()
    one_line_error(capsys, pmdb(a, "export", tmp_path / "x", "--platform", "nowhere"), "unknown platform 'nowhere'")
    one_line_error(capsys, pmdb(a, "export", tmp_path / "one"), "already exists")
    broken = tmp_path / "A"
    shutil.copytree(a, broken)
    next((broken / "artifacts" / "traces").iterdir()).unlink()
    one_line_error(capsys, pmdb(broken, "export", tmp_path / "never"), "is missing: the store refers to it")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A", "one", "pred"]


@pytest.mark.slow  # the shared workspaces take ~30 s to collect
def test_an_older_export_is_brought_up_to_date_by_the_migrations(homes, b_copy, tmp_path, capsys):
    out = tmp_path / "export-a"
    assert pmdb(homes["A"], "export", out) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    older = manifest["schema_version"] - 1
    with duckdb.connect() as conn:  # rewrite the export as the previous schema version held it
        migrator.migrate(conn, migrator.available()[:older])
        columns = {t: [c for (c,) in conn.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = ?",
                                                  [t]).fetchall()] for t in read_schema(conn).order}
        for rel in [r for r in manifest["files"] if r.startswith("tables/")]:
            table = rel[len("tables/"):-len(".parquet")]
            if table not in columns:
                (out / rel).unlink()
                del manifest["files"][rel]
                continue
            path = out / rel
            conn.execute(f"COPY (SELECT {', '.join(columns[table])} FROM read_parquet('{path}')) "
                         f"TO '{path}.old' (FORMAT parquet)")
            Path(f"{path}.old").replace(path)
            manifest["files"][rel]["sha256"] = sha256_file(path)
    (out / "manifest.json").write_text(json.dumps({**manifest, "schema_version": older}))
    before = counts(b_copy)
    capsys.readouterr()
    assert pmdb(b_copy, "merge", out) == 0
    assert capsys.readouterr().out.startswith("merged 5 runs: ")
    assert counts(b_copy)["trace_ops"] == before["trace_ops"] + counts(homes["A"])["trace_ops"]
