"""Runs from one workspace to another: :func:`export` writes completed runs, with every row they need, as Parquet
files and a ``manifest.json``; :func:`merge` adds an export (or another workspace) to this store in one transaction.

What goes with a run is decided by :mod:`pmdb.exchange_schema`: its rows in every table with a run_id column, the
rows those own, the runs they point at (a prediction's trace set, an overhead table's traces: whole runs), the
shared rows they use (platforms with their GPU specs, workloads, tasks) and its trace files (by sha256). MLflow model
versions are not exported; neither are the runs that made them (fit, fit-cross-gpu, plan-calibrate) nor quickstart
bookkeeping: re-fit on the merged data.

Merging: integer ids are each store's own, so merged rows take new ids from this store's sequences and every
reference follows them. A run id already here with the same content (:func:`exchange_schema.fingerprints`) is
skipped, so merging twice adds nothing; the same run id with different content refuses the whole merge. A run that
imported a file this store holds from its own completed run is skipped (with the runs that depend on it): its rows
are here already. Shared rows are matched by name, config hash or content; this store's row wins.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import socket
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb

import pmdb
from pmdb import migrator, op_coverage
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.exchange_schema import (NOT_EXPORTED_KINDS, SHARED, TEXT_ID, Ref, Schema, difference,
                                  fingerprints, q, read_schema, rows_sql, run_edges)
from pmdb.store import Store

FORMAT = "pmdb-export"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
SRC = "pmdb_merge_src"  # the staging database, attached to the store while merging
NOT_EXPORTED_NOTE = ("MLflow model versions and aliases, and the runs that made them (" + ", ".join(NOT_EXPORTED_KINDS)
                     + "), are not exported: fit again on the merged store")


@dataclass
class ExportResult:
    """What :func:`export` wrote: runs asked for, runs they depend on, rows per table, files (bytes)."""

    directory: Path
    runs: list[str]
    dependencies: list[str]
    platforms: list[str]
    rows: dict[str, int]
    trace_files: int
    bytes: int


@dataclass
class MergeResult:
    """What :func:`merge` added: runs, rows per table (only tables that grew), trace files copied; runs already
    here; runs skipped with the reason; notes (platforms whose local row was kept)."""

    source: Path
    added: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)
    trace_files: int = 0
    notes: list[str] = field(default_factory=list)


class ExportWriteError(PmdbError):
    """The export's files could not be written (disk full): nothing of the export is left, the store unchanged."""

    exit_code = 1


def _disk_full(exc: BaseException) -> bool:
    """Whether an error is a write that found no room (ENOSPC, a file size limit)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
        return True
    text = str(exc).lower()
    return isinstance(exc, (OSError, duckdb.Error)) and ("no space" in text or "too large" in text)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return (lines[0] if lines else type(exc).__name__)[:300]


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# ---- export ---------------------------------------------------------------------------------------------------
def select_runs(store: Store, platforms: Sequence[str] = (), runs: Sequence[str] = ()) -> list[str]:
    """Completed runs to export (all, or those on ``platforms`` / with these ids), oldest first."""
    rows = store.conn.execute("SELECT run_id, kind, platform, status FROM collection_runs "
                              "ORDER BY started_at, run_id").fetchall()
    by_id = {r[0]: r for r in rows}
    known = {p for (p,) in store.conn.execute("SELECT name FROM platforms").fetchall()}
    for name in platforms:
        if name not in known:
            raise PmdbError(f"unknown platform {name!r} (see `pmdb platform --list`)")
    for run_id in runs:
        if run_id not in by_id:
            raise PmdbError(f"no run {run_id!r} in this store (see `pmdb runs`)")
        _, kind, _, status = by_id[run_id]
        if status != "completed":
            raise PmdbError(f"run {run_id} is {status}: only completed runs are exported")
        if kind in NOT_EXPORTED_KINDS:
            raise PmdbError(f"run {run_id} is a {kind} run: {NOT_EXPORTED_NOTE}")
    chosen = [r[0] for r in rows if r[3] == "completed" and r[1] not in NOT_EXPORTED_KINDS
              and (not platforms or r[2] in platforms) and (not runs or r[0] in runs)]
    if not chosen:
        raise PmdbError("no completed runs to export" + (" on " + ", ".join(platforms) if platforms else ""))
    return chosen


def _closure(edges: set[tuple[str, str]], runs: Sequence[str]) -> list[str]:
    """The runs and every run they depend on, directly or not."""
    needs: dict[str, set[str]] = {}
    for run, dep in edges:
        needs.setdefault(run, set()).add(dep)
    seen, todo = list(runs), list(runs)
    while todo:
        for dep in sorted(needs.get(todo.pop(), ())):
            if dep not in seen:
                seen.append(dep)
                todo.append(dep)
    return seen


def _shared_keys(schema: Schema, runs: str) -> dict[str, str]:
    """Per shared table: a SELECT of its rows that the exported rows use."""
    users = {t: rows_sql(schema, t, runs) for t in schema.moved()}
    out: dict[str, str] = {}
    for table in reversed(schema.order):  # workloads before the tasks and platforms they point at
        if table not in SHARED or table == "gpu_specs":
            continue
        using = [f"{q(ref.target_column)} IN (SELECT {q(ref.column)} FROM ({sql}))" for user, sql in users.items()
                 for ref in schema.refs[user] if ref.target == table and ref.form == "scalar"]
        out[table] = users[table] = f"SELECT * FROM {q(table)} WHERE {' OR '.join(using) or 'FALSE'}"
    if "gpu_specs" in schema.columns:
        out["gpu_specs"] = f"SELECT * FROM gpu_specs WHERE platform IN (SELECT name FROM ({out['platforms']}))"
    return out


def export(store: Store, directory: Path, *, platforms: Sequence[str] = (), runs: Sequence[str] = ()) -> ExportResult:
    """Write the chosen completed runs (and what they need) to the new ``directory``: written beside it under a
    temporary name and renamed at the end, so a failed export leaves nothing."""
    directory = Path(directory).absolute()
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise PmdbError(f"{directory} already exists: export into a new directory")
    if not directory.parent.is_dir():
        raise PmdbError(f"cannot write {directory}: directory {directory.parent} does not exist")
    conn = store.conn
    schema = read_schema(conn)
    chosen = select_runs(store, platforms, runs)
    everything = _closure(run_edges(conn, schema), chosen)
    dependencies = everything[len(chosen):]
    statuses = dict(conn.execute("SELECT run_id, status FROM collection_runs").fetchall())
    running = [r for r in dependencies if statuses[r] == "running"]
    if running:
        raise PmdbError(f"run {running[0]} is still running and the runs to export depend on it: wait for it")
    tmp = directory.with_name(f".{directory.name}.tmp-{uuid.uuid4().hex[:8]}")
    conn.execute("CREATE OR REPLACE TEMP TABLE _pmdb_export_runs (run_id VARCHAR PRIMARY KEY)")
    try:
        conn.execute("INSERT INTO _pmdb_export_runs SELECT unnest(?::VARCHAR[])", [everything])
        runs_sql = "SELECT run_id FROM _pmdb_export_runs"
        selects = {t: rows_sql(schema, t, runs_sql) for t in schema.moved()} | _shared_keys(schema, runs_sql)
        (tmp / "tables").mkdir(parents=True)
        files: dict[str, dict[str, Any]] = {}
        rows: dict[str, int] = {}
        for table in schema.order:
            name = f"tables/{table}.parquet"
            order = f" ORDER BY {q(schema.ids[table][0])}" if table in schema.ids else ""
            conn.execute(f"COPY ({selects[table]}{order}) TO {_sql_text(str(tmp / name))} (FORMAT parquet)")
            rows[table] = int(conn.execute(f"SELECT count(*) FROM read_parquet({_sql_text(str(tmp / name))})"
                                           ).fetchone()[0])
            files[name] = {"rows": rows[table]}
        traces = conn.execute(f"SELECT DISTINCT path FROM ({selects['traces']}) ORDER BY path").fetchall()
        for (rel,) in traces:
            source = store.workspace.home / rel
            if not source.is_file():
                raise PmdbError(f"trace file {source} is missing: the store refers to it, so it cannot be exported")
            target = tmp / _safe_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
            files[rel] = {}
        total = 0
        for rel, entry in files.items():
            entry["sha256"] = sha256_file(tmp / rel)
            entry["bytes"] = (tmp / rel).stat().st_size
            total += entry["bytes"]
        plats = [p for (p,) in conn.execute(f"SELECT name FROM ({selects['platforms']}) ORDER BY name").fetchall()]
        prints = fingerprints(conn, schema, everything)
        kinds = dict(conn.execute("SELECT run_id, kind FROM collection_runs").fetchall())
        manifest = {
            "format": FORMAT, "format_version": FORMAT_VERSION, "schema_version": migrator.current_version(conn),
            "pmdb_version": pmdb.__version__, "created_at": datetime.now().isoformat(timespec="seconds"),
            "source": {"hostname": socket.gethostname(), "workspace": str(store.workspace.home)},
            "platforms": plats, "run_ids": chosen, "dependency_run_ids": dependencies,
            "runs": [{"run_id": r, "kind": kinds[r], "status": statuses[r], "content_sha256": prints[r]["sha256"]}
                     for r in everything],
            "files": files, "not_exported": NOT_EXPORTED_NOTE}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=False) + "\n")
        if directory.exists():
            directory.rmdir()  # an empty directory given by the user
        os.rename(tmp, directory)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if _disk_full(exc):
            raise ExportWriteError(f"writing the export to {directory} failed ({_first_line(exc)}): free disk "
                                   f"space, then re-run; the store was not changed and no partial export is "
                                   f"left") from None
        raise
    finally:
        with contextlib.suppress(duckdb.Error):
            conn.execute("DROP TABLE IF EXISTS _pmdb_export_runs")
    return ExportResult(directory, chosen, dependencies, plats, rows, len(traces), total)


def _safe_relative(rel: str) -> Path:
    """A stored trace path, checked to stay inside the workspace's artifacts/traces/."""
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts or path.parts[:2] != ("artifacts", "traces"):
        raise PmdbError(f"trace path {rel!r} is not under artifacts/traces/: refused")
    return path


# ---- merge ----------------------------------------------------------------------------------------------------
def read_manifest(source: Path) -> dict[str, Any]:
    """The manifest of an export, its format and schema version checked, and every file's sha256 verified."""
    path = source / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise PmdbError(f"cannot read {path}: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise PmdbError(f"{path} is not a pmdb export manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise PmdbError(f"{path} has export format {manifest.get('format_version')!r}; this pmdb reads "
                        f"{FORMAT_VERSION}: use the pmdb that wrote it")
    version, known = manifest.get("schema_version"), len(migrator.available())
    if not isinstance(version, int) or version < 1:
        raise PmdbError(f"{path}: bad schema_version {version!r}")
    if version > known:
        raise PmdbError(f"{source} has schema version {version} but this pmdb knows only up to {known}: "
                        f"upgrade pmdb to merge it")
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise PmdbError(f"{path} lists no files")
    for rel, entry in files.items():
        file = source / rel
        if ".." in Path(rel).parts or Path(rel).is_absolute():
            raise PmdbError(f"{path} lists a file outside the export: {rel!r}")
        if not file.is_file():
            raise PmdbError(f"{file} is missing from the export: nothing merged")
        if sha256_file(file) != entry.get("sha256"):
            raise PmdbError(f"{file} does not match its sha256 in {MANIFEST} (changed or damaged): nothing merged")
    return manifest


@contextlib.contextmanager
def _export_of(store: Store, source: Path) -> Iterator[Path]:
    """``source`` itself when it is an export; a temporary export of it when it is another workspace."""
    source = Path(source).absolute()
    if (source / MANIFEST).is_file():
        yield source
        return
    home = source.parent if source.is_file() and source.name == "pmdb.duckdb" else source
    other = Workspace(home)
    if not other.exists():
        raise PmdbError(f"{source} is neither a pmdb export (no {MANIFEST}) nor a workspace (no pmdb.duckdb)")
    if other.db_path.resolve() == store.workspace.db_path.resolve():
        raise PmdbError(f"{source} is this workspace: nothing to merge")
    tmp = store.workspace.artifacts / "tmp" / f"merge-{uuid.uuid4().hex[:12]}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        conn = duckdb.connect(str(other.db_path), read_only=True)
    except duckdb.Error as exc:
        why = "a command is writing to it: wait for it to finish" if "lock" in str(exc).lower() else \
            str(exc).strip().splitlines()[0][:200]
        raise PmdbError(f"cannot read {other.db_path}: {why}") from None
    try:
        migrator.check(conn, migrator.available())  # a newer or edited schema is refused; an older one is read
        export(Store(other, conn, read_only=True), tmp)  # as it is (not migrated: the source stays untouched)
        yield tmp
    finally:
        conn.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _stage(source: Path, manifest: dict[str, Any], path: Path) -> None:
    """Load the export into a new DuckDB at ``path``: its schema version's migrations, the Parquet files (foreign
    keys checked), then this pmdb's later migrations (an older export is brought up to date by them)."""
    version = manifest["schema_version"]
    conn = duckdb.connect(str(path))
    try:
        known = migrator.available()
        migrator.migrate(conn, known[:version])
        schema = read_schema(conn)
        listed = {rel for rel in manifest["files"] if rel.startswith("tables/")}
        expected = {f"tables/{t}.parquet" for t in schema.order}
        if listed != expected:
            odd = sorted(listed ^ expected)
            raise PmdbError(f"{source}: the tables of the export do not match schema version {version} "
                            f"({', '.join(odd[:3])}): nothing merged")
        for table in schema.order:
            rel = f"tables/{table}.parquet"
            try:
                parquet = _sql_text(str(source / rel))
                conn.execute(f"INSERT INTO {q(table)} BY NAME SELECT * FROM read_parquet({parquet})")
            except duckdb.Error as exc:
                raise PmdbError(f"{source / rel} cannot be loaded ({str(exc).splitlines()[0][:200]}): "
                                f"nothing merged") from None
            count = conn.execute(f"SELECT count(*) FROM {q(table)}").fetchone()[0]
            if count != manifest["files"][rel].get("rows"):
                raise PmdbError(f"{source / rel} holds {count} rows, its manifest says "
                                f"{manifest['files'][rel].get('rows')}: nothing merged")
        migrator.migrate(conn, known)
    finally:
        conn.close()


def merge(store: Store, source: Path) -> MergeResult:
    """Add the runs of an export directory (or of another workspace) to ``store``, all or nothing."""
    with _export_of(store, source) as folder:
        manifest = read_manifest(folder)
        staging = store.workspace.artifacts / "tmp" / f"merge-{uuid.uuid4().hex[:12]}.duckdb"
        staging.parent.mkdir(parents=True, exist_ok=True)
        try:
            _stage(folder, manifest, staging)
            store.conn.execute(f"ATTACH {_sql_text(str(staging))} AS {SRC} (READ_ONLY)")
            try:
                return _merge_staged(store, folder, Path(source))
            finally:
                with contextlib.suppress(duckdb.Error):
                    store.conn.execute(f"DETACH {SRC}")
        finally:
            for leftover in (staging, staging.with_name(staging.name + ".wal")):
                leftover.unlink(missing_ok=True)


def _merge_staged(store: Store, folder: Path, source: Path) -> MergeResult:
    conn, prefix = store.conn, f"{SRC}."
    schema = read_schema(conn)
    theirs = read_schema(conn, SRC)
    if theirs.columns != schema.columns:
        raise PmdbError(f"{source}: its tables differ from this store's after migration: nothing merged")
    result = MergeResult(source)
    runs = [r for (r,) in conn.execute(f"SELECT run_id FROM {prefix}collection_runs ORDER BY started_at, run_id"
                                       ).fetchall()]
    here = {r for (r,) in conn.execute("SELECT run_id FROM collection_runs WHERE run_id IN "
                                       "(SELECT unnest(?::VARCHAR[]))", [runs]).fetchall()}
    result.present = [r for r in runs if r in here]
    mine, yours = fingerprints(conn, schema, result.present), fingerprints(conn, schema, result.present, prefix)
    for run_id in result.present:
        if mine[run_id]["sha256"] != yours[run_id]["sha256"]:
            raise PmdbError(f"run {run_id} is in this store with different content "
                            f"({difference(mine[run_id], yours[run_id])}): nothing merged")
    new = [r for r in runs if r not in here]
    result.skipped = _duplicates(conn, schema, new, prefix)
    result.added = [r for r in new if r not in result.skipped]
    copied: list[Path] = []
    try:
        with store.transaction():
            conn.execute("CREATE OR REPLACE TEMP TABLE _pmdb_new_runs (run_id VARCHAR PRIMARY KEY)")
            conn.execute("CREATE OR REPLACE TEMP TABLE _pmdb_present_runs (run_id VARCHAR PRIMARY KEY)")
            conn.execute("INSERT INTO _pmdb_new_runs SELECT unnest(?::VARCHAR[])", [result.added])
            conn.execute("INSERT INTO _pmdb_present_runs SELECT unnest(?::VARCHAR[])", [result.present])
            # leftovers of this store's runs that did not complete give way, as a re-import does
            conn.execute(f"DELETE FROM imported_files WHERE sha256 IN (SELECT sha256 FROM {prefix}imported_files "
                         f"WHERE run_id IN (SELECT run_id FROM _pmdb_new_runs))")
            _id_maps(conn, schema, prefix)
            result.notes = _platform_notes(conn, prefix)
            for table in schema.order:
                added = _insert(conn, schema, table, prefix)
                if added:
                    result.rows[table] = added
            if result.rows.get("op_measurements"):
                op_coverage.rebuild(conn)  # the summary of completed runs' op rows, merged ones included
            copied = _copy_traces(store, folder, prefix)
    except BaseException:
        _remove(copied)
        raise
    finally:
        temps = [f"_pmdb_map_{t}" for t in schema.ids] + [f"_pmdb_map_{t}_{r.column}" for t in schema.order
                                                          for r in schema.refs[t] if r.form != "scalar"]
        for name in temps + ["_pmdb_new_runs", "_pmdb_present_runs"]:
            with contextlib.suppress(duckdb.Error):
                conn.execute(f"DROP TABLE IF EXISTS temp.{q(name)}")
    result.trace_files = len(copied)
    return result


def _duplicates(conn: duckdb.DuckDBPyConnection, schema: Schema, new: list[str], prefix: str) -> dict[str, str]:
    """New runs whose imported files this store holds from one of its completed runs (their rows are here), and
    the new runs that depend on those: run -> reason."""
    held = conn.execute(
        f"SELECT s.run_id, s.sha256, f.run_id FROM {prefix}imported_files s JOIN imported_files f USING (sha256) "
        f"JOIN collection_runs r ON r.run_id = f.run_id WHERE r.status = 'completed' "
        f"AND s.run_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY ALL", [new]).fetchall()
    skipped: dict[str, str] = {}
    for run_id, sha, holder in held:
        skipped.setdefault(run_id, f"its imported file {sha[:12]} is here already (run {holder})")
    if skipped:
        edges = run_edges(conn, schema, prefix)
        grew = True
        while grew:
            grew = False
            for run_id, dep in sorted(edges):
                if dep in skipped and run_id in new and run_id not in skipped:
                    skipped[run_id] = f"it depends on skipped run {dep}"
                    grew = True
    return skipped


def _id_maps(conn: duckdb.DuckDBPyConnection, schema: Schema, prefix: str) -> None:
    """Per table with an integer id: ``_pmdb_map_<table>(old, new, fresh)``. Rows of runs already here map onto
    this store's rows of the same run (same order); shared rows onto the row with the same key; the rest get new
    ids from this store's sequence (in their old order)."""
    for table in schema.order:
        if table not in schema.ids:
            continue
        id_col, sequence = schema.ids[table]
        mapped = f"_pmdb_map_{table}"
        idq = q(id_col)
        if schema.is_run_table(table):
            conn.execute(
                f"CREATE OR REPLACE TEMP TABLE {q(mapped)} AS "
                f"WITH s AS (SELECT {idq} AS old, run_id, row_number() OVER (PARTITION BY run_id ORDER BY {idq}) k "
                f"FROM {prefix}{q(table)} WHERE run_id IN (SELECT run_id FROM _pmdb_present_runs)), "
                f"h AS (SELECT {idq} AS new, run_id, row_number() OVER (PARTITION BY run_id ORDER BY {idq}) k "
                f"FROM {q(table)} WHERE run_id IN (SELECT run_id FROM _pmdb_present_runs)) "
                f"SELECT s.old, h.new, FALSE AS fresh FROM s JOIN h USING (run_id, k)")
            todo = (f"SELECT {idq} AS old FROM {prefix}{q(table)} "
                    f"WHERE run_id IN (SELECT run_id FROM _pmdb_new_runs)")
        else:
            key = SHARED[table] or tuple(c for c in schema.columns[table] if c not in (id_col, "created_at"))
            matches = " AND ".join(_same(schema, table, c) for c in key)
            joins = "".join(f" LEFT JOIN {q('_pmdb_map_' + r.target)} m_{r.column} "
                            f"ON m_{r.column}.old = s.{q(r.column)}"
                            for r in schema.refs[table] if r.target in schema.ids and r.form == "scalar")
            conn.execute(
                f"CREATE OR REPLACE TEMP TABLE {q(mapped)} AS SELECT s.{idq} AS old, "
                f"(SELECT min(h.{idq}) FROM {q(table)} h WHERE {matches}) AS new, FALSE AS fresh "
                f"FROM {prefix}{q(table)} s{joins}")
            conn.execute(f"DELETE FROM {q(mapped)} WHERE new IS NULL")
            todo = f"SELECT {idq} AS old FROM {prefix}{q(table)} WHERE {idq} NOT IN (SELECT old FROM {q(mapped)})"
        count = conn.execute(f"SELECT count(*) FROM ({todo})").fetchone()[0]
        if not count:
            continue
        last = conn.execute(f"SELECT max(nextval({_sql_text(sequence)})) FROM range(?)", [count]).fetchone()[0]
        first = last - count + 1
        if conn.execute(f"SELECT count(*) FROM {q(table)} WHERE {idq} BETWEEN ? AND ?", [first, last]).fetchone()[0]:
            raise PmdbError(f"{table}: ids {first}..{last} from sequence {sequence} are taken already: nothing merged")
        conn.execute(f"INSERT INTO {q(mapped)} SELECT old, {first} - 1 + row_number() OVER (ORDER BY old), TRUE "
                     f"FROM ({todo})")


def _same(schema: Schema, table: str, column: str) -> str:
    """SQL: this store's row h has the same ``column`` as the source row s (ids through their map; compared as
    text, so JSON columns compare too)."""
    ref = next((r for r in schema.refs[table] if r.column == column and r.form == "scalar"
                and r.target in schema.ids), None)
    theirs = f"m_{column}.new" if ref is not None else f"s.{q(column)}"
    return f"h.{q(column)}::VARCHAR IS NOT DISTINCT FROM {theirs}::VARCHAR"


def _platform_notes(conn: duckdb.DuckDBPyConnection, prefix: str) -> list[str]:
    rows = conn.execute(f"SELECT s.name FROM {prefix}platforms s JOIN platforms h USING (name) "
                        f"WHERE s.fingerprint IS DISTINCT FROM h.fingerprint "
                        f"OR s.is_imported IS DISTINCT FROM h.is_imported ORDER BY 1").fetchall()
    return [f"platform {name}: kept this store's row (the source's describes other hardware)" for (name,) in rows]


def _insert(conn: duckdb.DuckDBPyConnection, schema: Schema, table: str, prefix: str) -> int:
    """Insert the source's rows of ``table`` that are new here, ids and references mapped; returns the count."""
    exprs, joins, checks = [], [], []
    id_col = schema.ids.get(table, (None,))[0]
    for n, column in enumerate(schema.columns[table]):
        ref = next((r for r in schema.refs[table] if r.column == column and r.target in schema.ids), None)
        if column == id_col:
            joins.append(f"JOIN {q('_pmdb_map_' + table)} j{n} ON j{n}.old = s.{q(column)}")
            exprs.append(f"j{n}.new")
        elif ref is not None and ref.form == "scalar":
            joins.append(f"LEFT JOIN {q('_pmdb_map_' + ref.target)} j{n} ON j{n}.old = s.{q(column)}")
            exprs.append(f"j{n}.new")
            checks.append(f"(s.{q(column)} IS NOT NULL AND j{n}.new IS NULL)")
        elif ref is not None:
            mapped = _map_values(conn, ref, prefix)
            joins.append(f"LEFT JOIN {q(mapped)} j{n} ON j{n}.old = s.{q(column)}::VARCHAR")
            exprs.append(f"j{n}.new")
            checks.append(f"(s.{q(column)} IS NOT NULL AND j{n}.new IS NULL)")
        else:
            exprs.append(f"s.{q(column)}")
    if schema.is_run_table(table):
        where = "s.run_id IN (SELECT run_id FROM _pmdb_new_runs)"
    elif table in schema.owner:
        ref = schema.owner[table]
        where = (f"s.{q(ref.column)} IN (SELECT old FROM {q('_pmdb_map_' + ref.target)} WHERE fresh)")
    elif table in schema.ids:
        where = f"j{schema.columns[table].index(id_col)}.fresh"
    else:  # platforms, gpu_specs: by their key
        key = SHARED[table][0]  # type: ignore[index]
        where = f"s.{q(key)} NOT IN (SELECT {q(key)} FROM {q(table)})"
    body = f"FROM {prefix}{q(table)} s {' '.join(joins)} WHERE {where}"
    if checks:
        bad = conn.execute(f"SELECT count(*) {body} AND ({' OR '.join(checks)})").fetchone()[0]
        if bad:
            raise PmdbError(f"{table}: {bad} row(s) point at rows the source does not hold: nothing merged")
    columns = ", ".join(q(c) for c in schema.columns[table])
    return int(conn.execute(f"INSERT INTO {q(table)} ({columns}) SELECT {', '.join(exprs)} {body}").fetchone()[0])


def _map_values(conn: duckdb.DuckDBPyConnection, ref: Ref, prefix: str) -> str:
    """A temp table (old value as text -> new value) for a list or text reference, made in Python."""
    ids = dict(conn.execute(f"SELECT old, new FROM {q('_pmdb_map_' + ref.target)}").fetchall())
    mapped = f"_pmdb_map_{ref.table}_{ref.column}"
    kind = "BIGINT[]" if ref.form == "array" else "VARCHAR"
    conn.execute(f"CREATE OR REPLACE TEMP TABLE {q(mapped)} (old VARCHAR, new {kind})")
    values = conn.execute(f"SELECT DISTINCT {q(ref.column)}::VARCHAR, {q(ref.column)} FROM {prefix}{q(ref.table)} "
                          f"WHERE {q(ref.column)} IS NOT NULL").fetchall()
    rows = []
    for text, value in values:
        if ref.form == "array":
            if all(v in ids for v in value if v is not None):
                rows.append((text, [None if v is None else ids[v] for v in value]))
        else:
            parts = [TEXT_ID.fullmatch(p) for p in value.split(";")]
            if all(m is not None and int(m.group(2)) in ids for m in parts):
                rows.append((text, ";".join(f"{m.group(1)}:{ids[int(m.group(2))]}" for m in parts)))
    if rows:
        conn.executemany(f"INSERT INTO {q(mapped)} VALUES (?, ?)", rows)
    return mapped


def _copy_traces(store: Store, folder: Path, prefix: str) -> list[Path]:
    """Copy the files of the traces just merged that this workspace lacks (content-addressed); returns the files
    copied. On an error the files copied so far are removed."""
    rels = [r for (r,) in store.conn.execute(
        f"SELECT DISTINCT path FROM {prefix}traces WHERE trace_id IN "
        f"(SELECT old FROM _pmdb_map_traces WHERE fresh) ORDER BY 1").fetchall()]
    copied: list[Path] = []
    try:
        for rel in rels:
            target = store.workspace.home / _safe_relative(rel)
            if target.is_file():
                continue
            source = folder / rel
            if not source.is_file():
                raise PmdbError(f"trace file {rel} is not in the export: nothing merged")
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            shutil.copyfile(source, partial)
            os.replace(partial, target)
            copied.append(target)
    except BaseException:
        _remove(copied)
        raise
    return copied


def _remove(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
