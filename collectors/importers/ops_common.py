"""What the kernel-measurement importers share: reading a file (CSV, gzipped CSV, Parquet) into a column table that
remembers line numbers, column-wise checks that report the earliest bad line, the JSON text of params and kernels,
and the atomic, idempotent import into ``op_measurements`` of a named platform.

An import is all or nothing: every file is parsed before anything is written; a bad line (or a last row cut short,
:func:`collectors.importers.common.cut_short`) raises ONE error naming the file and line; the platform row (when
new), the ``import-ops`` run, the rows and the ``imported_files`` entries of all new files go in one transaction.
The same content (sha256 of the file's bytes) is never imported twice. Rows of a cuda platform are GPU timings
(cache state ``device``: CUDA events or the source's own timer); the source's central value becomes ``median_us``
(µs).

Parsers work on whole columns (pandas/numpy), not row by row: a NeuSight GPU folder (~50k rows) parses and stores in
about a second.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Sequence

import duckdb
import numpy as np
import pandas as pd

from collectors.importers import launch_floor
from collectors.importers.common import cut_short, import_error
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.userfiles import expand_files, read_bytes

KIND = "import-ops"
SUFFIXES = (".csv", ".csv.gz", ".parquet", ".pq")
DEVICE_KINDS = ("cuda", "cpu")
# What a parser returns per row (``ParsedOps.rows``): config and params the canonical and the stored JSON text of the
# op's parameters (``params_json``), times in µs, device '' where the file does not say, kernels JSON text or None.
# Single-call latency tables (NeuSight) also give ``single_call_us`` (the latency as imported), ``host_floor_us`` and
# ``host_lead_us`` (the table's per-call host floor and the part of it removed: ``launch_floor``); their ``median_us``
# is then the kernel's device time. NaN where the source times kernels on the device itself.
ROW_COLUMNS = ("op", "pass", "implementation", "dtype", "device", "config", "params", "median_us", "std_us",
               "repetitions", "kernels", "single_call_us", "host_floor_us", "host_lead_us")
_INSERTED = ("run_id", "platform", "op", "pass", "implementation", "dtype", "device", "cache_state", "params",
             "config_key", "median_us", "std_us", "repetitions", "kernels", "source", "single_call_us",
             "host_floor_us", "host_lead_us")


@dataclass
class Table:
    """A file's records: ``frame`` has one column per header name (CSV, ``is_text``: text, '' when empty;
    Parquet: the file's own types); ``line_of(record)`` the file line (Parquet: row number) of a record (0-based);
    ``problems`` (record, message) the records that could not be read whole."""

    path: Path
    frame: pd.DataFrame
    line_of: Callable[[int], int]
    header_line: int = 1
    problems: list[tuple[int, str]] = field(default_factory=list)
    is_text: bool = True
    _texts: dict[str, pd.Series] = field(default_factory=dict, repr=False)

    @property
    def columns(self) -> list[str]:
        return [str(c) for c in self.frame.columns]

    def __len__(self) -> int:
        return len(self.frame)

    def text(self, column: str) -> pd.Series:
        """The column as stripped text ('' for an empty or missing cell)."""
        if column not in self._texts:
            raw = self.frame[column]
            self._texts[column] = raw.str.strip() if self.is_text else \
                pd.Series([_cell_text(v) for v in raw], index=raw.index, dtype=object)
        return self._texts[column]

    def numbers(self, column: str, errors: "FirstError", *, positive: bool = False, optional: bool = False,
                where: np.ndarray | None = None) -> np.ndarray:
        """The column as float64; a cell that is not a finite non-negative (``positive``: > 0) number is flagged in
        ``errors`` (only rows in ``where``, when given). ``optional``: empty cells are NaN, not flagged."""
        raw = self.frame[column]
        if pd.api.types.is_numeric_dtype(raw) and not pd.api.types.is_bool_dtype(raw):
            values = raw.to_numpy(dtype=np.float64, na_value=np.nan)
            empty = np.isnan(values)
        else:
            values = pd.to_numeric(raw.to_numpy(dtype=object) if self.is_text else self.text(column).to_numpy(
                dtype=object), errors="coerce").astype(np.float64)
            empty = np.zeros(len(values), dtype=bool)
            unread = np.flatnonzero(np.isnan(values))
            if len(unread):
                empty[unread] = self.text(column).to_numpy(dtype=object)[unread] == ""
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (values < 0)
            if positive:
                bad |= values == 0
        if optional:
            bad &= ~empty
        if where is not None:
            bad &= where
        errors.flag(bad, lambda i: number_problem(_cell_text(raw.iat[i]), column, positive))
        return values


def _cell_text(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return ""
    return str(value).strip()


def number_problem(text: str, what: str, positive: bool = False) -> str:
    """Why a cell is not an acceptable number (the message of one error)."""
    try:
        float(text)
    except ValueError:
        return f"{what} is {text!r}, not a number"
    return f"{what} is {text!r}: must be a {'positive' if positive else 'non-negative'} number"


class FirstError:
    """Collects the problems of a table, column by column, and raises the one on the earliest record: one error
    naming the file and the line."""

    def __init__(self, table: Table):
        self.table = table
        self.first: tuple[int, str] | None = None
        for record, message in table.problems:
            self._keep(record, message)

    def _keep(self, record: int, message: str) -> None:
        if self.first is None or record < self.first[0]:
            self.first = (record, message)

    def flag(self, bad: np.ndarray | pd.Series, message: Callable[[int], str]) -> None:
        """Flag the records where ``bad`` holds; ``message(record)`` says what is wrong with the first one."""
        mask = np.asarray(bad, dtype=bool)
        if mask.any():
            record = int(np.argmax(mask))
            if self.first is None or record < self.first[0]:
                self.first = (record, message(record))

    def raise_first(self) -> None:
        if self.first is not None:
            record, message = self.first
            raise import_error(self.table.path, self.table.line_of(record), message)


def _csv_table(path: Path, text: str) -> Table:
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    header_line = 1
    records: list[list[str]] = []
    for values in reader:
        if not values or (len(values) == 1 and not values[0].strip()):
            continue
        if header is None:
            header, header_line = [c.strip() for c in values], reader.line_num
            continue
        records.append(values)
    if header is None:
        raise import_error(path, None, "empty file")
    if len(set(header)) != len(header):
        dup = sorted({c for c in header if header.count(c) > 1})
        raise import_error(path, header_line, f"repeated column name(s) {', '.join(dup)}")
    width, problems = len(header), []
    for index in (i for i, r in enumerate(records) if len(r) != width):
        problems.append((index, f"{len(records[index])} fields but the header has {width} columns "
                                f"(a truncated or broken line)"))
        records[index] = (records[index] + [""] * width)[:width]
    cut = cut_short(text)
    if cut is not None and records:
        problems.append((len(records) - 1, cut[1]))
    frame = pd.DataFrame(records, columns=header, dtype=object) if records else \
        pd.DataFrame({c: pd.Series([], dtype=object) for c in header})

    def line_of(record: int) -> int:
        """The file line where record ``record`` starts (read again: only on an error)."""
        again = csv.reader(io.StringIO(text))
        seen, previous, data = -1, 0, False
        for values in again:
            start, previous = previous + 1, again.line_num
            if not values or (len(values) == 1 and not values[0].strip()):
                continue
            if not data:
                data = True  # the header
                continue
            seen += 1
            if seen == record:
                return start
        return previous

    return Table(path, frame, line_of, header_line, problems)


def _parquet_table(path: Path, data: bytes) -> Table:
    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises many types for a bad file
        raise import_error(path, None, f"not a Parquet file ({str(exc).splitlines()[0][:120]})") from None
    frame.columns = [str(c).strip() for c in frame.columns]
    if len(set(frame.columns)) != len(frame.columns):
        raise import_error(path, None, "repeated column names")
    return Table(path, frame.reset_index(drop=True), lambda record: record + 1, header_line=0, is_text=False)


def read_table(path: Path, data: bytes) -> Table:
    """The file as a header-named table (gzip detected by its magic bytes; Parquet by its suffix or magic). Error
    lines of CSV files are file lines; of Parquet files, row numbers (from 1)."""
    if path.suffix.lower() in (".parquet", ".pq") or data[:4] == b"PAR1":
        return _parquet_table(path, data)
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise import_error(path, None, f"broken or truncated gzip file ({exc})") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise import_error(path, data[:exc.start].count(b"\n") + 1, "not a UTF-8 text file") from None
    if "\x00" in text:
        raise import_error(path, None, "not a text file (NUL bytes)")
    return _csv_table(path, text)


def number_text(values: np.ndarray) -> np.ndarray:
    """JSON text of numbers as ``json.dumps`` writes params: whole numbers as ints, others as Python floats."""
    values = np.asarray(values, dtype=np.float64)
    if len(values) and np.all(np.mod(values, 1) == 0) and np.all(np.abs(values) < 2 ** 53):
        return values.astype(np.int64).astype(str).astype(object)
    return np.array([str(int(v)) if v.is_integer() else repr(float(v)) for v in values.tolist()], dtype=object)


def params_json(values: Mapping[str, np.ndarray | float | int], count: int) -> tuple[np.ndarray, np.ndarray]:
    """Per row, the JSON text of ``{name: value}`` with sorted keys, twice: canonical (no spaces: what config keys
    hash, as ``collectors.ops.catalogue.canonical`` writes it) and stored (``json.dumps``'s spacing, as the
    collectors store ``params``)."""
    canonical = np.full(count, "{", dtype=object)
    stored = np.full(count, "{", dtype=object)
    for position, key in enumerate(sorted(values)):
        column = values[key]
        text = number_text(np.full(count, column, dtype=np.float64) if np.ndim(column) == 0 else column)
        name = json.dumps(key)
        canonical = canonical + f"{',' if position else ''}{name}:" + text
        stored = stored + f"{', ' if position else ''}{name}: " + text
    return canonical + "}", stored + "}"


def expand(paths: Sequence[Path]) -> list[Path]:
    """Files as given; a directory stands for its CSV / gzipped CSV / Parquet files (sorted, not recursive)."""
    return expand_files(paths, SUFFIXES, ".csv, .csv.gz or .parquet files")


@dataclass
class ParsedOps:
    """A parsed file: ``rows`` (columns ROW_COLUMNS), the GPU it names (if any) and the software versions seen."""

    path: Path
    format: str
    rows: pd.DataFrame
    device_name: str | None = None
    software: dict[str, str] = field(default_factory=dict)
    sha256: str = ""
    size_bytes: int = 0


OpParser = Callable[[Path, Table], ParsedOps]


def rows_frame(count: int, **columns: object) -> pd.DataFrame:
    """A ``ParsedOps.rows`` frame of ``count`` rows from per-row arrays or scalars (defaults: fwd, torch, float32,
    no device, no std, repetitions or kernels)."""
    defaults: dict[str, object] = {"pass": "fwd", "implementation": "torch", "dtype": "float32", "device": "",
                                   "std_us": np.nan, "repetitions": np.nan, "kernels": None, "single_call_us": np.nan,
                                   "host_floor_us": np.nan, "host_lead_us": np.nan}
    unknown = set(columns) - set(ROW_COLUMNS)
    if unknown:
        raise TypeError(f"unknown row columns {sorted(unknown)}")
    frame = pd.DataFrame({name: columns.get(name, defaults.get(name)) for name in ROW_COLUMNS}, index=range(count))
    frame["median_us"] = frame["median_us"].astype(np.float64)
    for name in ("std_us", "single_call_us", "host_floor_us", "host_lead_us"):
        frame[name] = frame[name].astype(np.float64)
    frame["repetitions"] = pd.array(frame["repetitions"].astype(np.float64), dtype="Int64")
    return frame


def config_keys(rows: pd.DataFrame) -> list[str]:
    """sha256 of (op, pass, implementation, dtype, config) per row, the way the ops collector keys its configs
    (canonical JSON, sorted keys; threads are not part of an imported timing: null)."""
    def quoted(column: str) -> pd.Series:
        return rows[column].map({v: json.dumps(v) for v in rows[column].unique()})

    texts = ('{"config":' + rows["config"] + ',"dtype":' + quoted("dtype") + ',"implementation":'
             + quoted("implementation") + ',"op":' + quoted("op") + ',"pass":' + quoted("pass") + ',"threads":null}')
    return [hashlib.sha256(t.encode()).hexdigest() for t in texts]


@dataclass
class OpImportReport:
    """What an import did, per file."""

    run_id: str | None
    imported: list[tuple[Path, int, str]]    # (path, rows, ops)
    skipped: list[tuple[Path, str]]          # (path, reason)


def check_target(store: Store, platform: str, device_kind: str) -> None:
    """The named platform may take imported measurements: not this machine, and of the same device kind."""
    platforms.check_name(platform)
    if device_kind not in DEVICE_KINDS:
        raise PmdbError(f"bad --device-kind {device_kind!r}: use cuda or cpu")
    existing = platforms.find(store, platform)
    if existing is None:
        return
    if not existing.is_imported:
        raise PmdbError(f"platform {platform!r} is this machine (detected, not imported); measurements recorded "
                        f"elsewhere go to a platform of their own: choose another --platform name")
    if existing.device_kind.value != device_kind:
        raise PmdbError(f"platform {platform!r} is a {existing.device_kind.value} platform, not {device_kind}: "
                        f"choose another --platform name")


def _platform_facts(store: Store, platform: str, parsed: list[ParsedOps]) -> None:
    """Fill the imported platform's GPU name and software versions where it has none yet."""
    devices = sorted({p.device_name for p in parsed if p.device_name})
    software: dict[str, str] = {}
    for p in parsed:
        software.update(p.software)
    if devices:
        store.conn.execute("UPDATE platforms SET gpu_name = coalesce(gpu_name, ?), gpu_count = coalesce(gpu_count, 1) "
                           "WHERE name = ?", [devices[0], platform])
    for key, column in (("torch", "torch_version"), ("cuda", "cuda_version")):
        if software.get(key):
            store.conn.execute(f"UPDATE platforms SET {column} = coalesce({column}, ?) WHERE name = ?",
                               [software[key], platform])


def _check_same_gpu(store: Store, platform: str, parsed: list[ParsedOps]) -> None:
    """Files naming a GPU go only to a platform of that GPU (or one that names none yet)."""
    existing = platforms.find(store, platform)
    devices = sorted({p.device_name for p in parsed if p.device_name})
    if existing is None or existing.gpu is None or not devices:
        return
    if existing.gpu.name.strip().lower() != devices[0].strip().lower():
        raise PmdbError(f"platform {platform!r} is a {existing.gpu.name}, but the files were measured on "
                        f"{devices[0]}: choose the --platform of that GPU")


def _read_and_parse(paths: list[Path], fmt: str, parser: OpParser) -> tuple[list[ParsedOps], list[tuple[Path, str]]]:
    parsed_files: list[ParsedOps] = []
    skipped: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    for path in paths:
        data = read_bytes(path)
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            skipped.append((path, f"same content as {seen[digest]} given before"))
            continue
        seen[digest] = path
        parsed = parser(path, read_table(path, data))
        if parsed.rows.empty:
            raise import_error(path, None, f"no {fmt} measurement rows found")
        parsed.sha256, parsed.size_bytes = digest, len(data)
        parsed_files.append(parsed)
    devices = sorted({p.device_name for p in parsed_files if p.device_name})
    if len(devices) > 1:
        raise PmdbError(f"the files were measured on several GPUs ({', '.join(devices)}): import each GPU's files "
                        f"into its own --platform")
    return parsed_files, skipped


def import_op_files(store: Store, paths: Sequence[Path], fmt: str, parser: OpParser, *, platform: str,
                    device_kind: str = "cuda") -> OpImportReport:
    """Parse every file, then write all new ones in one transaction of one 'import-ops' run."""
    check_target(store, platform, device_kind)
    files_in_order = expand(paths)
    parsed_files, skipped = _read_and_parse(files_in_order, fmt, parser)
    launch_floor.settle_import([p.rows for p in parsed_files])    # single-call tables: one host floor per import
    _check_same_gpu(store, platform, parsed_files)
    done = {sha: (path, where) for sha, path, where in store.conn.execute(
        "SELECT f.sha256, f.path, f.platform FROM imported_files f JOIN collection_runs r USING (run_id) "
        "WHERE r.status = 'completed'").fetchall()}
    new = []
    for parsed in parsed_files:
        if parsed.sha256 in done:
            path, where = done[parsed.sha256]
            skipped.append((parsed.path, f"already imported (same content as {path}, platform {where})"))
        else:
            new.append(parsed)
    order = {path: index for index, path in reversed(list(enumerate(files_in_order)))}
    skipped.sort(key=lambda item: order.get(item[0], 0))
    if not new:
        return OpImportReport(None, [], skipped)
    rows = pd.concat([p.rows for p in new], ignore_index=True)
    rows["platform"] = platform
    rows["cache_state"] = "device" if device_kind == "cuda" else "warm"
    rows["source"] = "import"  # migration 0004: where a measurement came from
    rows["device"] = rows["device"].where(rows["device"] != "", "cuda:0" if device_kind == "cuda" else "cpu")
    rows["config_key"] = config_keys(rows)
    software: dict[str, str] = {}
    for parsed in new:
        software.update(parsed.software)
    devices = sorted({p.device_name for p in new if p.device_name})
    args = {"files": [str(p.path) for p in new], "format": fmt, "device_kind": device_kind,
            "device": devices[0] if devices else None}
    files = pd.DataFrame({"sha256": [p.sha256 for p in new], "path": [str(p.path) for p in new], "format": fmt,
                          "platform": platform, "size_bytes": [p.size_bytes for p in new]})
    try:
        with store.transaction():
            platforms.ensure_named(store, platform, device_kind=device_kind)
            _platform_facts(store, platform, new)
            run = store.start_run(KIND, platform, args)
            rows["run_id"] = files["run_id"] = run.run_id
            # leftovers of imports whose run never completed block nothing
            store.conn.execute("DELETE FROM imported_files WHERE sha256 IN (SELECT unnest(?::VARCHAR[])) AND run_id "
                               "NOT IN (SELECT run_id FROM collection_runs WHERE status = 'completed')",
                               [[p.sha256 for p in new]])
            store.insert("imported_files", files)                # both join this transaction
            store.insert("op_measurements", rows[list(_INSERTED)])
            run.summary = {"files": len(new), "rows": len(rows), "skipped": len(skipped), "software": software}
            run.finish("completed")
    except duckdb.Error as exc:
        raise PmdbError(f"storing the import failed, nothing was stored: {str(exc).splitlines()[0]}") from None
    imported = [(p.path, len(p.rows), ",".join(sorted(p.rows["op"].unique()))) for p in new]
    return OpImportReport(run.run_id, imported, skipped)
