"""What moves with a run between stores, read from the store's own catalog (for `pmdb export` and `pmdb merge`).

Every base table is one of:
- a **run table**: it has a ``run_id`` column; a run's rows are those with its run id (collection_runs included);
- an **owned table**: no ``run_id``, but its first foreign key points at a run table with an integer id (trace ops
  of a trace, samples of an overhead version, ...): its rows go with the row they point at;
- a **shared table** (platforms, gpu_specs, tasks, workloads): rows many runs use, matched by a natural key;
- **not exchanged**: MLflow's mirror (model_versions, model_aliases) and the migrations' bookkeeping.

Integer ids are the columns whose default is a sequence; references are the declared foreign keys plus the few the
schema does not declare (:data:`UNDECLARED`). A table this module cannot classify is refused, never skipped.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import duckdb

from pmdb.errors import PmdbError

NOT_EXCHANGED = {"schema_migrations": "migration bookkeeping", "model_versions": "MLflow registry mirror",
                 "model_aliases": "MLflow registry mirror",
                 "op_coverage_summary": "derived from op_measurements (merge recomputes it)"}
# shared table -> the columns that say two rows are the same (None: every column but its id and created_at)
SHARED: dict[str, tuple[str, ...] | None] = {"platforms": ("name",), "gpu_specs": ("platform",), "tasks": None,
                                             "workloads": ("config_hash",)}
# runs whose product lives in MLflow (re-fit on the merged data) or that only record quickstart progress
NOT_EXPORTED_KINDS = ("fit", "fit-cross-gpu", "plan-calibrate", "quickstart")
# references the schema does not declare: (table, column) -> (table, column referenced, form)
UNDECLARED = {("op_measurements", "trace_id"): ("traces", "trace_id", "scalar"),
              ("overhead_versions", "trace_ids"): ("traces", "trace_id", "array"),
              ("shard_studies", "trace_origin"): ("trace_sets", "trace_set_id", "text")}
TEXT_ID = re.compile(r"([a-z-]+):(\d+)")  # shard_studies.trace_origin: 'derived-from:<id>;captured:<id>'
_NEXTVAL = re.compile(r"nextval\('([A-Za-z0-9_]+)'\)")


@dataclass(frozen=True)
class Ref:
    """``table.column`` points at ``target.target_column``: one value (scalar), a list of them (array) or
    ``label:<id>`` items in a text (text)."""

    table: str
    column: str
    target: str
    target_column: str
    form: str = "scalar"


@dataclass
class Schema:
    """The exchanged tables of one store, referenced tables first."""

    order: list[str]
    columns: dict[str, list[str]]
    ids: dict[str, tuple[str, str]]              # table -> (integer id column, its sequence)
    refs: dict[str, list[Ref]]                   # table -> its references, in column order
    owner: dict[str, Ref] = field(default_factory=dict)  # owned table -> the reference to its owning row

    def is_run_table(self, table: str) -> bool:
        return "run_id" in self.columns[table]

    def moved(self) -> list[str]:
        """Run tables and owned tables, in order."""
        return [t for t in self.order if t not in SHARED]


def q(name: str) -> str:
    """A quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def read_schema(conn: duckdb.DuckDBPyConnection, database: str | None = None) -> Schema:
    """Classify the base tables of ``database`` (default: the connection's own)."""
    db = database or conn.execute("SELECT current_database()").fetchone()[0]
    names = [t for (t,) in conn.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = ? AND schema_name = 'main' AND NOT temporary",
        [db]).fetchall() if t not in NOT_EXCHANGED]
    columns: dict[str, list[str]] = {t: [] for t in names}
    ids: dict[str, tuple[str, str]] = {}
    for table, column, default in conn.execute(
            "SELECT table_name, column_name, column_default FROM duckdb_columns() WHERE database_name = ? "
            "AND schema_name = 'main' ORDER BY table_name, column_index", [db]).fetchall():
        if table in columns:
            columns[table].append(column)
            match = _NEXTVAL.search(default or "")
            if match:
                ids[table] = (column, match.group(1))
    refs: dict[str, list[tuple[int, Ref]]] = {t: [] for t in names}
    for table, cols, indexes, target, target_cols in conn.execute(
            "SELECT table_name, constraint_column_names, constraint_column_indexes, referenced_table, "
            "referenced_column_names FROM duckdb_constraints() WHERE database_name = ? AND schema_name = 'main' "
            "AND constraint_type = 'FOREIGN KEY'", [db]).fetchall():
        if table in refs and target in columns:
            if len(cols) != 1:
                raise PmdbError(f"table {table} has a foreign key over several columns: pmdb cannot exchange it")
            refs[table].append((indexes[0], Ref(table, cols[0], target, target_cols[0])))
    for (table, column), (target, target_column, form) in UNDECLARED.items():
        if table in columns and column in columns[table] and target in columns:
            refs[table].append((columns[table].index(column), Ref(table, column, target, target_column, form)))
    ordered = {t: [r for _, r in sorted(refs[t], key=lambda item: item[0])] for t in names}
    schema = Schema(_topological(names, ordered), columns, ids, ordered)
    unknown = []
    for table in names:
        if table in SHARED or schema.is_run_table(table):
            continue
        owner = next((r for r in ordered[table] if r.form == "scalar" and r.target in ids
                      and schema.is_run_table(r.target) and ids[r.target][0] == r.target_column), None)
        if owner is None:
            unknown.append(table)
        else:
            schema.owner[table] = owner
    if unknown:
        raise PmdbError(f"table(s) {', '.join(sorted(unknown))} have no run_id and no owning row: this pmdb does "
                        f"not know how to move them between stores")
    return schema


def _topological(names: list[str], refs: dict[str, list[Ref]]) -> list[str]:
    """Tables ordered so that every table comes after the tables it references."""
    pending = {t: {r.target for r in refs[t] if r.target != t} for t in names}
    order: list[str] = []
    while pending:
        ready = sorted(t for t, deps in pending.items() if not deps - set(order))
        if not ready:
            raise PmdbError(f"tables {', '.join(sorted(pending))} reference each other in a cycle")
        order += ready
        for table in ready:
            del pending[table]
    return order


def rows_sql(schema: Schema, table: str, runs: str, prefix: str = "") -> str:
    """SELECT of ``table``'s rows that go with the runs listed by the SQL ``runs`` (one run_id column)."""
    if schema.is_run_table(table):
        return f"SELECT * FROM {prefix}{q(table)} WHERE run_id IN ({runs})"
    ref = schema.owner[table]
    return (f"SELECT * FROM {prefix}{q(table)} WHERE {q(ref.column)} IN "
            f"(SELECT {q(ref.target_column)} FROM ({rows_sql(schema, ref.target, runs, prefix)}))")


def _run_of(schema: Schema, table: str, prefix: str) -> tuple[str, str]:
    """(FROM clause with the table as x, expression of the run each row goes with)."""
    if schema.is_run_table(table):
        return f"{prefix}{q(table)} x", "x.run_id"
    ref = schema.owner[table]  # always a run table (read_schema)
    return (f"{prefix}{q(table)} x JOIN {prefix}{q(ref.target)} o ON o.{q(ref.target_column)} = x.{q(ref.column)}",
            "o.run_id")


def run_edges(conn: duckdb.DuckDBPyConnection, schema: Schema, prefix: str = "") -> set[tuple[str, str]]:
    """(run, run it depends on): a row of the first points at a row of the second (its trace set, its traces...)."""
    edges: set[tuple[str, str]] = set()
    for table in schema.moved():
        source, run = _run_of(schema, table, prefix)
        for ref in schema.refs[table]:
            if ref is schema.owner.get(table) or ref.target in SHARED or not schema.is_run_table(ref.target):
                continue
            if ref.column == "run_id" and ref.target == "collection_runs":
                continue
            col, tcol = f"x.{q(ref.column)}", f"y.{q(ref.target_column)}"
            on = {"scalar": f"{tcol} = {col}", "array": f"list_contains({col}, {tcol})",
                  "text": f"list_contains(list_transform(regexp_extract_all({col}, '{TEXT_ID.pattern}', 2), "
                          f"lambda v: v::BIGINT), {tcol})"}[ref.form]
            edges |= set(conn.execute(
                f"SELECT DISTINCT {run}, y.run_id FROM {source} JOIN {prefix}{q(ref.target)} y ON {on} "
                f"WHERE {run} <> y.run_id").fetchall())
    return edges


def fingerprints(conn: duckdb.DuckDBPyConnection, schema: Schema, runs: Sequence[str],
                 prefix: str = "") -> dict[str, dict[str, Any]]:
    """Per run: its collection_runs row (as text) and its row count per table — what 'the same content' means when
    a run id is in both stores. ``sha256`` of that is the run's content hash."""
    if not runs:
        return {}
    listed = "SELECT unnest(?::VARCHAR[])"
    cursor = conn.execute(f"SELECT * FROM {prefix}collection_runs WHERE run_id IN ({listed})", [list(runs)])
    names = [d[0] for d in cursor.description]
    out: dict[str, dict[str, Any]] = {}
    for row in cursor.fetchall():
        record = dict(zip(names, row))
        out[record["run_id"]] = {"run": {k: None if v is None else str(v) for k, v in record.items()}, "rows": {}}
    for table in schema.moved():
        if table == "collection_runs":
            continue
        source, run = _run_of(schema, table, prefix)
        for run_id, count in conn.execute(f"SELECT {run}, count(*) FROM {source} WHERE {run} IN ({listed}) "
                                          f"GROUP BY ALL", [list(runs)]).fetchall():
            if run_id in out:
                out[run_id]["rows"][table] = int(count)
    for entry in out.values():
        entry["sha256"] = hashlib.sha256(json.dumps([entry["run"], entry["rows"]], sort_keys=True).encode()
                                         ).hexdigest()
    return out


def difference(here: dict[str, Any], there: dict[str, Any]) -> str:
    """The first difference of two fingerprints, in words."""
    for table in sorted(set(here["rows"]) | set(there["rows"])):
        a, b = here["rows"].get(table, 0), there["rows"].get(table, 0)
        if a != b:
            return f"{table}: {a} rows here, {b} in the source"
    for column in sorted(set(here["run"]) | set(there["run"])):
        a, b = here["run"].get(column), there["run"].get(column)
        if a != b:
            return f"collection_runs.{column}: {str(a)[:30]!r} here, {str(b)[:30]!r} in the source"
    return "same content"
