"""nccl-tests results: the programs' stdout and its CSV form (as in shared/data/collectives/vtrain_a100_allreduce).

Columns are found by their header names. Both forms repeat the per-variant columns (time, algbw, busbw, #wrong):
the first group is out-of-place, the second in-place. stdout headers are '#' lines (names, then units, which
are µs for time); CSV names carry their unit (``time(ns)``). nccl-tests' time is the average over its iterations:
it becomes ``lat_p50_us`` (the only central value the source gives). The world size comes from the '#  Rank'
lines of stdout; the collective from the ``*_perf`` program name, the file name or --collective.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from collectors.importers.common import (ImportHints, ParsedFile, ParsedRow, collective_from_name, import_error,
                                         normalize_dtype)

FORMAT = "nccl-tests"

_PROGRAMS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
             "alltoall": "all_to_all"}
_PROGRAM = re.compile(r"\b([a-z_]+?)_perf(?:_mpi)?\b")
_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b", re.MULTILINE)
_ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_SHARED = {"size", "count", "type", "redop", "root"}
_PER_VARIANT = {"time", "algbw", "busbw", "#wrong", "error"}
_TIME_UNITS_PER_US = {"us": 1.0, "ns": 1e3, "ms": 1e-3, "s": 1e-6}


@dataclass
class _Layout:
    """Column indices: shared ones by name, per-variant ones per group, and time units per µs."""

    shared: dict[str, int]
    groups: list[dict[str, int]]
    time_units_per_us: float
    width: int


def _split_name(name: str) -> tuple[str, str | None]:
    match = re.match(r"^([^()]+?)\s*(?:\(([^)]*)\))?$", name.strip().lower())
    return (match.group(1), match.group(2)) if match else (name.strip().lower(), None)


def _layout(path: Path, line: int, names: list[str], default_unit: str = "us") -> _Layout:
    shared: dict[str, int] = {}
    groups: list[dict[str, int]] = []
    time_unit = default_unit
    for index, raw in enumerate(names):
        name, unit = _split_name(raw)
        if name in _SHARED:
            shared[name] = index
        elif name in _PER_VARIANT:
            if not groups or name in groups[-1]:
                groups.append({})
            groups[-1][name] = index
            if name == "time" and unit:
                if unit not in _TIME_UNITS_PER_US:
                    raise import_error(path, line, f"unknown time unit {unit!r} in column {raw!r}")
                time_unit = unit
    if "size" not in shared or not groups or any("time" not in g for g in groups):
        raise import_error(path, line, f"not an nccl-tests header (need size and time columns): {' '.join(names)}")
    if len(groups) > 2:
        raise import_error(path, line, f"{len(groups)} result groups: nccl-tests prints out-of-place and in-place")
    return _Layout(shared, groups, _TIME_UNITS_PER_US[time_unit], len(names))


def _value(path: Path, line: int, text: str, what: str) -> float | None:
    """A finite, non-negative number; None for nccl-tests' 'N/A'. Anything else is an error naming the line."""
    if text.strip().upper() == "N/A":
        return None
    try:
        value = float(text)
    except ValueError:
        raise import_error(path, line, f"{what} is {text!r}, not a number") from None
    if not math.isfinite(value) or value < 0:
        raise import_error(path, line, f"{what} is {text!r}: must be a non-negative number")
    return value


def _rows_of(path: Path, line: int, values: list[str], layout: _Layout, collective: str) -> list[ParsedRow]:
    if len(values) != layout.width:
        raise import_error(path, line, f"{len(values)} fields but the header has {layout.width} columns")
    size = _value(path, line, values[layout.shared["size"]], "size")
    if size is None or size != int(size) or size < 1:
        raise import_error(path, line, f"size {values[layout.shared['size']]!r} is not a positive whole number")
    if "count" in layout.shared:
        count = _value(path, line, values[layout.shared["count"]], "count")
        if count is not None and count != int(count):
            raise import_error(path, line, f"count {values[layout.shared['count']]!r} is not a whole number")
    dtype = normalize_dtype(values[layout.shared["type"]]) if "type" in layout.shared else None
    rows = []
    for number, group in enumerate(layout.groups):
        wrong = group.get("#wrong", group.get("error"))
        if wrong is not None and (_value(path, line, values[wrong], "#wrong") or 0) > 0:
            raise import_error(path, line, f"nccl-tests found {values[wrong]} wrong results at {int(size)} B: "
                                           f"those timings are of an incorrect run")
        time = _value(path, line, values[group["time"]], "time")
        if time is None:
            continue
        if time <= 0:
            raise import_error(path, line, f"time is {values[group['time']]}: must be positive")
        rows.append(ParsedRow(
            collective=collective, size_bytes=int(size), lat_us=time / layout.time_units_per_us, line=line,
            algbw_gbps=_value(path, line, values[group["algbw"]], "algbw") if "algbw" in group else None,
            busbw_gbps=_value(path, line, values[group["busbw"]], "busbw") if "busbw" in group else None,
            dtype=dtype, in_place=(number == 1) if len(layout.groups) == 2 else None))
    return rows


def _collective(path: Path, text: str, hints: ImportHints) -> str:
    programs = {m for m in _PROGRAM.findall(text)}
    known = {_PROGRAMS[p] for p in programs if p in _PROGRAMS}
    if hints.collective:
        if known and hints.collective not in known:
            raise import_error(path, None, f"the output is from {', '.join(sorted(programs))}_perf but "
                                           f"--collective says {hints.collective}")
        return hints.collective
    if len(known) == 1:
        return known.pop()
    if programs and not known:
        raise import_error(path, None, f"nccl-tests program {', '.join(sorted(programs))}_perf measures a "
                                       f"collective pmdb does not model")
    named = collective_from_name(path)
    if named is None:
        raise import_error(path, None, "cannot tell which collective this nccl-tests output measured: "
                                       "give --collective")
    return named


def _parse_stdout(path: Path, text: str, collective: str) -> list[ParsedRow]:
    layout: _Layout | None = None
    rows: list[ParsedRow] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        tokens = raw.split()
        if not tokens:
            continue
        if tokens[0].startswith("#"):
            names = raw.lstrip("#").split()
            if "size" in names and "time" in names:
                layout = _layout(path, lineno, names)
            continue
        if not re.match(r"^\d", tokens[0]):
            continue  # NCCL INFO/WARN log lines interleaved with the table
        if layout is None:
            raise import_error(path, lineno, "a result line before the '#  size  count ...' header")
        rows.extend(_rows_of(path, lineno, tokens, layout, collective))
    return rows


def _parse_csv(path: Path, text: str, collective: str) -> list[ParsedRow]:
    records = [(n, r) for n, r in enumerate(csv.reader(io.StringIO(text)), start=1) if any(c.strip() for c in r)]
    header_line, header = records[0]
    layout = _layout(path, header_line, [c.strip() for c in header])
    rows: list[ParsedRow] = []
    for lineno, record in records[1:]:
        rows.extend(_rows_of(path, lineno, [c.strip() for c in record], layout, collective))
    return rows


def parse(path: Path, text: str, hints: ImportHints) -> ParsedFile:
    """Parse nccl-tests stdout or its CSV form into rows."""
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first:
        raise import_error(path, None, "empty file")
    collective = _collective(path, text, hints)
    is_csv = first.count(",") >= 2 and not first.lstrip().startswith("#")
    rows = _parse_csv(path, text, collective) if is_csv else _parse_stdout(path, text, collective)
    ranks = {int(r) for r in _RANK_LINE.findall(text)}
    iters = _ITERS.search(text)
    return ParsedFile(path=path, format=FORMAT, backend="nccl", rows=rows,
                      stated_world_size=len(ranks) if ranks else None,
                      warmup=int(iters.group(1)) if iters else None, iterations=int(iters.group(2)) if iters else None)
