"""What the collective importers share: the parsed form of a result file, the hints a user gives, file-name and
bandwidth-ratio inference, and the atomic, idempotent import into the store.

An import is all or nothing: every file is parsed before anything is written, a malformed file (or one cut short,
:func:`cut_short`) raises an error naming the file and line, and the platform row (when new), the run, the rows and
the ``imported_files`` entries of all files go in one transaction. The same content (sha256) is never imported
twice.
"""
from __future__ import annotations

import csv
import hashlib
import re
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import duckdb

from collectors.comms.bus import from_reported_size, world_size_from_factor
from collectors.comms.store_rows import TABLE, make_row, write_atomic
from collectors.comms.sizes import COLLECTIVES
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store

_DTYPES = {"float": "float32", "float32": "float32", "fp32": "float32", "half": "float16", "float16": "float16",
           "fp16": "float16", "bfloat16": "bfloat16", "bf16": "bfloat16", "double": "float64",
           "float64": "float64", "int": "int32", "int32": "int32", "int64": "int64", "int8": "int8",
           "uint8": "uint8", "uint32": "uint32", "uint64": "uint64"}

# File-name tokens naming a collective (compared after lower-casing and dropping '-', '_', ' ', '.').
_NAME_CODES = {"ar": "all_reduce", "allreduce": "all_reduce", "a2a": "all_to_all", "alltoall": "all_to_all",
               "a2av": "all_to_allv", "alltoallv": "all_to_allv", "ag": "all_gather", "allgather": "all_gather",
               "rs": "reduce_scatter", "reducescatter": "reduce_scatter"}


def import_error(path: Path | str, line: int | None, message: str) -> PmdbError:
    """A one-line error naming the file (and the line, when known)."""
    where = f"{path}:{line}" if line else f"{path}"
    return PmdbError(f"{where}: {message}")


# A number cut off mid-way: '216.', '1.5e', '1.5e-', '-', '.'
_CUT_NUMBER = re.compile(r"[-+]?(?:\d+\.|\d*\.?\d+[eE][-+]?|\.)|[-+]")
_DECIMAL = re.compile(r"[-+]?\d+(?:\.(\d+))?")
_ROWS_ABOVE = 50   # rows above the last one whose decimals it is compared with


def table_fields(line: str) -> list[str]:
    """A table line's fields, stripped: comma-separated (CSV) or whitespace-separated (program output)."""
    if "," in line:
        return [field.strip() for field in next(csv.reader([line]), [])]
    return line.split()


def cut_short(text: str) -> tuple[int, str] | None:
    """(line, what is wrong) when a text table was cut while it was written, else None.

    Every writer (csv, pandas, nccl-tests, PARAM) ends a file with a newline; a file that does not end in one was
    cut when its last line (a row cut inside its last field, its fewer fields are the parsers' own error)
    ends in a number cut off mid-way ('216.' of '216.36', '1.5e-'), inside a quoted CSV field, or in a number with
    fewer decimals than the same column in every row above it ('23.7' where the rows above print '%.2f')."""
    if not text or text.endswith(("\n", "\r")):
        return None
    lines = text.splitlines()
    line, last_line = len(lines), lines[-1]
    if "," in last_line and text.count('"') % 2:
        return line, "the file ends inside a quoted field (no newline after the last row): it was cut short"
    fields = table_fields(last_line)
    last = fields[-1] if fields else ""
    if _CUT_NUMBER.fullmatch(last):
        return line, f"the file ends inside a number ({last!r}, no newline after the last row): it was cut short"
    number = _DECIMAL.fullmatch(last)
    if number is None:
        return None
    digits = set()
    rows = 0
    for above in lines[max(0, line - 1 - _ROWS_ABOVE):line - 1]:
        cells = table_fields(above)
        same = _DECIMAL.fullmatch(cells[-1]) if len(cells) == len(fields) else None
        if same is not None:
            digits.add(len(same.group(1) or ""))
            rows += 1
    if rows >= 2 and len(digits) == 1 and (wanted := digits.pop()) > len(number.group(1) or ""):
        return line, (f"the file ends in {last!r} without a newline, where the rows above have {wanted} "
                      f"decimals: it was cut short")
    return None


def normalize_dtype(text: str | None) -> str | None:
    """'float' -> 'float32', 'half' -> 'float16', ...; unknown names are kept as written."""
    if not text:
        return None
    return _DTYPES.get(text.strip().lower(), text.strip().lower())


def collective_from_name(path: Path) -> str | None:
    """The collective a file name states (AR_GPU8.csv -> all_reduce, alltoall_perf.txt -> all_to_all), or None."""
    tokens = [t for t in re.split(r"[^a-z0-9]+", path.stem.lower()) if t]
    squashed = re.sub(r"[^a-z0-9]", "", path.stem.lower())
    for token in tokens:
        if token in _NAME_CODES:
            return _NAME_CODES[token]
    for name in ("alltoallv", "alltoall", "allreduce", "allgather", "reducescatter"):
        if name in squashed:
            return _NAME_CODES[name]
    return None


@dataclass
class ImportHints:
    """What the user states on the command line; each overrides what a file says or implies."""

    world_size: int | None = None
    collective: str | None = None

    def __post_init__(self) -> None:
        if self.world_size is not None and self.world_size < 2:
            raise PmdbError(f"bad --world-size {self.world_size}: collectives need at least 2 ranks")
        if self.collective is not None and self.collective not in COLLECTIVES:
            raise PmdbError(f"bad --collective {self.collective!r} (known: {', '.join(COLLECTIVES)})")


@dataclass
class ParsedRow:
    """One result line of a source file (sizes in bytes, times in µs, bandwidths in GB/s)."""

    collective: str
    size_bytes: int
    lat_us: float                   # PARAM p50; nccl-tests average time
    line: int
    lat_p95_us: float | None = None
    lat_min_us: float | None = None
    lat_max_us: float | None = None
    algbw_gbps: float | None = None
    busbw_gbps: float | None = None
    dtype: str | None = None
    in_place: bool | None = None


@dataclass
class ParsedFile:
    """A parsed result file, ready to become rows once its world size is settled."""

    path: Path
    format: str
    backend: str
    rows: list[ParsedRow]
    stated_world_size: int | None = None    # what the file itself says (rank lines, 'world_size: N')
    iterations: int | None = None
    warmup: int | None = None
    sha256: str = ""
    size_bytes: int = 0
    world_size: int = 0


def settle_world_size(parsed: ParsedFile, hints: ImportHints) -> int:
    """The world size: --world-size, else what the file states, else the busbw/algbw ratio; an error when the
    ratio contradicts the chosen one (the bandwidths would be from a different world size)."""
    ratios: dict[str, list[float]] = {}
    for row in parsed.rows:
        algbw = row.algbw_gbps if row.algbw_gbps is not None else row.size_bytes / row.lat_us / 1e3
        if row.busbw_gbps and algbw and row.busbw_gbps >= 0.5 and algbw >= 0.5:
            ratios.setdefault(row.collective, []).append(row.busbw_gbps / algbw)
    implied = {c: world_size_from_factor(c, statistics.median(r)) for c, r in ratios.items()}
    chosen = hints.world_size or parsed.stated_world_size
    for collective, n in implied.items():
        factor = statistics.median(ratios[collective])
        if n is None:
            raise import_error(parsed.path, None, f"busbw/algbw ratio {factor:.3f} of {collective} fits no world "
                                                  f"size: the bandwidths are not nccl-tests/PARAM bus bandwidths")
        if chosen is not None and n != chosen:
            said = "--world-size" if hints.world_size else "the file"
            raise import_error(parsed.path, None, f"busbw/algbw ratio {factor:.3f} of {collective} means world size "
                                                  f"{n}, but {said} says {chosen}")
        chosen = chosen or n
    if chosen is None:
        raise import_error(parsed.path, None, "cannot tell the world size (no rank lines and no bandwidths to "
                                              "infer it from): give --world-size")
    return chosen


Parser = Callable[[Path, str, ImportHints], ParsedFile]


@dataclass
class ImportReport:
    """What an import did, per file."""

    run_id: str | None
    imported: list[tuple[Path, int, str, int]]   # (path, rows, collectives, world size)
    skipped: list[tuple[Path, str]]              # (path, reason)


def _read(path: Path) -> tuple[bytes, str]:
    if not path.is_file():
        raise PmdbError(f"no such file: {path}")
    data = path.read_bytes()
    try:
        return data, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise import_error(path, line, "not a UTF-8 text file") from None


def import_files(store: Store, paths: list[Path], fmt: str, parser: Parser, *, platform: str,
                 topology: str | None = None, hints: ImportHints | None = None,
                 device_kind: str = "cuda") -> ImportReport:
    """Parse every file, then write all new ones in one transaction of one 'import-comms' run."""
    hints = hints or ImportHints()
    platforms.check_name(platform)
    parsed_files: list[ParsedFile] = []
    skipped: list[tuple[Path, str]] = []
    seen: dict[str, Path] = {}
    for path in map(Path, paths):
        data, text = _read(path)
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            skipped.append((path, f"same content as {seen[digest]} given before"))
            continue
        seen[digest] = path
        parsed = parser(path, text, hints)
        cut = cut_short(text)
        if cut is not None:
            raise import_error(path, *cut)
        if not parsed.rows:
            raise import_error(path, None, f"no {fmt} result rows found")
        parsed.sha256, parsed.size_bytes = digest, len(data)
        parsed.world_size = settle_world_size(parsed, hints)
        parsed_files.append(parsed)
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
        return ImportReport(None, [], skipped)
    args = {"files": [str(p) for p in paths], "format": fmt, "topology": topology,
            "world_size": hints.world_size, "collective": hints.collective, "device_kind": device_kind}
    try:
        with store.transaction():  # the platform (when new), the run and its rows: all or nothing
            platforms.ensure_named(store, platform, device_kind=device_kind, topology=topology)
            run = store.start_run("import-comms", platform, args)
            rows, files = [], []
            for parsed in new:
                rows.extend(_rows(parsed, run.run_id, platform))
                files.append({"sha256": parsed.sha256, "run_id": run.run_id, "path": str(parsed.path),
                              "format": fmt, "platform": platform, "size_bytes": parsed.size_bytes})
            # leftovers of imports whose run never completed block nothing
            store.conn.execute("DELETE FROM imported_files WHERE sha256 IN (SELECT unnest(?::VARCHAR[])) AND run_id "
                               "NOT IN (SELECT run_id FROM collection_runs WHERE status = 'completed')",
                               [[p.sha256 for p in new]])
            write_atomic(store, [("imported_files", files), (TABLE, rows)])   # joins this transaction
            run.summary = {"files": len(new), "rows": len(rows), "skipped": len(skipped)}
            run.finish("completed")
    except duckdb.Error as exc:
        raise PmdbError(f"storing the import failed, nothing was stored: {str(exc).splitlines()[0]}") from None
    imported = [(p.path, len(p.rows), ",".join(sorted({r.collective for r in p.rows})), p.world_size) for p in new]
    return ImportReport(run.run_id, imported, skipped)


def _rows(parsed: ParsedFile, run_id: str, platform: str) -> list[dict]:
    """Rows of a parsed file: the source's bandwidths where it gives them, else size / time (x bus factor)."""
    return [make_row(
        run_id=run_id, platform=platform, collective=row.collective, backend=parsed.backend,
        world_size=parsed.world_size, sizes=from_reported_size(row.collective, row.size_bytes, parsed.world_size),
        split_kind="equal", source=parsed.format, dtype=row.dtype, in_place=row.in_place,
        latency={"lat_p50_us": row.lat_us, "lat_p95_us": row.lat_p95_us, "lat_min_us": row.lat_min_us,
                 "lat_max_us": row.lat_max_us},
        iterations=parsed.iterations, warmup=parsed.warmup, source_file=parsed.sha256,
        algbw_gbps=row.algbw_gbps, busbw_gbps=row.busbw_gbps) for row in parsed.rows]
