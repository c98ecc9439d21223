"""What the kernel-measurement importers share: the parsed form of a file, reading (CSV, gzipped CSV, Parquet) with
line numbers, and the atomic, idempotent import into ``op_measurements`` of a named platform.

An import is all or nothing: every file is parsed before anything is written; a bad line raises one error naming
the file and line; the rows and ``imported_files`` entries of all new files go in one transaction of one
``import-ops`` run. The same content (sha256 of the file's bytes) is never imported twice. Rows are GPU timings
(cache state ``device``: CUDA events or the source's own timer); the source's central value becomes ``median_us``.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import pandas as pd

from collectors.comms.store_rows import write_atomic
from collectors.importers.common import import_error
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store

KIND = "import-ops"
SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")


@dataclass
class OpRow:
    """One imported kernel measurement (time in µs; params numbers only, pmdb's names)."""

    op: str
    pass_: str
    params: dict[str, float]
    time_us: float
    line: int
    dtype: str = "float32"
    implementation: str = "torch"
    device: str = "cuda:0"
    kernels: list[dict[str, Any]] | None = None
    repetitions: int | None = None
    std_us: float | None = None


@dataclass
class ParsedOps:
    """A parsed file: rows, the device it names (if any) and software versions seen."""

    path: Path
    format: str
    rows: list[OpRow]
    device_name: str | None = None
    software: dict[str, str] = field(default_factory=dict)
    sha256: str = ""
    size_bytes: int = 0


OpParser = Callable[[Path, "Table"], ParsedOps]


@dataclass
class Table:
    """A file's records by header name: ``records`` yields (line number, {column: text}); ``columns`` in order."""

    path: Path
    columns: list[str]
    records: Callable[[], Iterator[tuple[int, dict[str, str]]]]


def _csv_table(path: Path, text: str) -> Table:
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip()), None)
    if start is None:
        raise import_error(path, None, "empty file")
    header = [c.strip() for c in next(csv.reader([lines[start]]))]
    if len(set(header)) != len(header):
        dup = sorted({c for c in header if header.count(c) > 1})
        raise import_error(path, start + 1, f"repeated column name(s) {', '.join(dup)}")

    def records() -> Iterator[tuple[int, dict[str, str]]]:
        reader = csv.reader(io.StringIO(text))
        for number, values in enumerate(reader, start=1):
            if number <= start + 1 or not any(v.strip() for v in values):
                continue
            line = reader.line_num
            if len(values) != len(header):
                raise import_error(path, line, f"{len(values)} fields but the header has {len(header)} columns")
            yield line, dict(zip(header, (v.strip() for v in values)))

    return Table(path, header, records)


def _parquet_table(path: Path, data: bytes) -> Table:
    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises many types for a bad file
        raise import_error(path, None, f"not a Parquet file ({str(exc).splitlines()[0][:120]})") from None
    columns = [str(c) for c in frame.columns]

    def records() -> Iterator[tuple[int, dict[str, str]]]:
        for number, values in enumerate(frame.itertuples(index=False), start=1):
            yield number, {c: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)
                           for c, v in zip(columns, values)}

    return Table(path, columns, records)


def read_table(path: Path, data: bytes) -> Table:
    """The file as a header-named table (gzip detected by its magic bytes; Parquet by its suffix)."""
    if path.suffix.lower() in (".parquet", ".pq"):
        return _parquet_table(path, data)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except OSError as exc:
            raise import_error(path, None, f"broken gzip file ({exc})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise import_error(path, data[:exc.start].count(b"\n") + 1, "not a UTF-8 text file") from None
    return _csv_table(path, text)


def number(path: Path, line: int, text: str, what: str, *, positive: bool = False) -> float:
    """A finite number from a field, else one error naming file, line and column."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise import_error(path, line, f"{what} is {text!r}, not a number") from None
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        raise import_error(path, line, f"{what} is {text!r}: must be a {'positive' if positive else 'non-negative'} "
                                       f"number")
    return value


def as_param(value: float) -> float | int:
    """Whole numbers as int (stored params compare and hash the same way as the collectors')."""
    return int(value) if float(value).is_integer() else float(value)


def expand(paths: list[Path]) -> list[Path]:
    """Files as given; a directory stands for its CSV / gzipped CSV / Parquet files (sorted, not recursive)."""
    out: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(SUFFIXES))
            if not found:
                raise PmdbError(f"{path}: a directory without .csv, .csv.gz or .parquet files")
            out.extend(found)
        elif not path.is_file():
            raise PmdbError(f"no such file: {path}")
        else:
            out.append(path)
    return out


def config_key(row: OpRow, device_kind: str = "cuda") -> str:
    """sha256 of (op, pass, implementation, dtype, config) the way the ops collector keys its configs (threads
    are not part of a GPU timing: None)."""
    text = json.dumps({"op": row.op, "pass": row.pass_, "implementation": row.implementation, "dtype": row.dtype,
                       "threads": None, "config": row.params}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass
class OpImportReport:
    """What an import did, per file."""

    run_id: str | None
    imported: list[tuple[Path, int, str]]    # (path, rows, ops)
    skipped: list[tuple[Path, str]]          # (path, reason)


def _platform_facts(store: Store, platform: str, parsed: list[ParsedOps]) -> None:
    """Fill the imported platform's GPU name and software versions where it has none yet."""
    devices = {p.device_name for p in parsed if p.device_name}
    software: dict[str, str] = {}
    for p in parsed:
        software.update(p.software)
    if devices:
        store.conn.execute("UPDATE platforms SET gpu_name = coalesce(gpu_name, ?), gpu_count = coalesce(gpu_count, 1) "
                           "WHERE name = ?", [sorted(devices)[0], platform])
    if software.get("torch"):
        store.conn.execute("UPDATE platforms SET torch_version = coalesce(torch_version, ?) WHERE name = ?",
                           [software["torch"], platform])
    if software.get("cuda"):
        store.conn.execute("UPDATE platforms SET cuda_version = coalesce(cuda_version, ?) WHERE name = ?",
                           [software["cuda"], platform])


def import_op_files(store: Store, paths: list[Path], fmt: str, parser: OpParser, *, platform: str,
                    device_kind: str = "cuda") -> OpImportReport:
    """Parse every file, then write all new ones in one transaction of one 'import-ops' run."""
    platforms.check_name(platform)
    existing = platforms.find(store, platform)
    if existing is not None and not existing.is_imported:
        raise PmdbError(f"platform {platform!r} is this machine; imported measurements go to a named platform "
                        f"of their own (--platform NAME)")
    parsed_files: list[ParsedOps] = []
    skipped: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    for path in expand(paths):
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            skipped.append((path, f"same content as {seen[digest]} given before"))
            continue
        seen[digest] = path
        parsed = parser(path, read_table(path, data))
        if not parsed.rows:
            raise import_error(path, None, f"no {fmt} measurement rows found")
        parsed.sha256, parsed.size_bytes = digest, len(data)
        parsed_files.append(parsed)
    devices = sorted({p.device_name for p in parsed_files if p.device_name})
    if len(devices) > 1:
        raise PmdbError(f"the files were measured on several GPUs ({', '.join(devices)}): import each GPU's files "
                        f"into its own --platform")
    done = dict(store.conn.execute(
        "SELECT f.sha256, f.path FROM imported_files f JOIN collection_runs r USING (run_id) "
        "WHERE r.status = 'completed'").fetchall())
    new = []
    for parsed in parsed_files:
        if parsed.sha256 in done:
            skipped.append((parsed.path, f"already imported (same content as {done[parsed.sha256]})"))
        else:
            new.append(parsed)
    if not new:
        return OpImportReport(None, [], skipped)
    platforms.ensure_named(store, platform, device_kind=device_kind)
    _platform_facts(store, platform, new)
    device_label = "cuda:0" if device_kind == "cuda" else "cpu"
    args = {"files": [str(p.path) for p in new], "format": fmt, "device_kind": device_kind,
            "device": devices[0] if devices else None}
    with store.run(KIND, platform, args) as run:
        rows, files = [], []
        for parsed in new:
            for row in parsed.rows:
                rows.append({
                    "run_id": run.run_id, "platform": platform, "op": row.op, "pass": row.pass_,
                    "implementation": row.implementation, "dtype": row.dtype, "device": row.device or device_label,
                    "cache_state": "device" if device_kind == "cuda" else "warm",
                    "params": json.dumps(row.params, sort_keys=True), "config_key": config_key(row),
                    "median_us": row.time_us, "std_us": row.std_us, "repetitions": row.repetitions,
                    "kernels": json.dumps(row.kernels) if row.kernels else None})
            files.append({"sha256": parsed.sha256, "run_id": run.run_id, "path": str(parsed.path),
                          "format": fmt, "platform": platform, "size_bytes": parsed.size_bytes})
        with store.transaction():  # leftovers of imports whose run never completed block nothing
            store.conn.execute("DELETE FROM imported_files WHERE sha256 IN (SELECT unnest(?::VARCHAR[])) AND run_id "
                               "NOT IN (SELECT run_id FROM collection_runs WHERE status = 'completed')",
                               [[p.sha256 for p in new]])
        ids = [r[0] for r in store.conn.execute("SELECT nextval('seq_measurement_id') FROM range(?)",
                                                [len(rows)]).fetchall()]
        for measurement_id, row in zip(ids, rows):
            row["measurement_id"] = measurement_id
        write_atomic(store, [("imported_files", files), ("op_measurements", rows)])
        software: dict[str, str] = {}
        for parsed in new:
            software.update(parsed.software)
        run.summary = {"files": len(new), "rows": len(rows), "skipped": len(skipped), "software": software}
    imported = [(p.path, len(p.rows), ",".join(sorted({r.op for r in p.rows}))) for p in new]
    return OpImportReport(run.run_id, imported, skipped)
