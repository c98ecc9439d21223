"""PARAM ``comms.py`` stdout: a ``COMMS-RES`` header line, then one ``COMMS-RES[-<coll>[-<dtype>[tag]]]`` line per
size. Columns are found by their header names, so every variant parses the same way:

- 2021: rows start with a bare ``COMMS-RES`` (the collective is not printed) and end at ``BusBW(GB/s)``;
- later: rows carry the collective (and then the dtype) in the prefix; a ``TotalLatency(us):p50`` column follows;
- 2026: "Latency" columns are named "Time" (``Time(us):p50``, ``TotalTime(us):p50``).

Header names may contain a space before a unit (``size (B)``); a token starting with '(' belongs to the name before
it. Rows may carry more values than the header names (PARAM formats drop trailing header names): extra trailing
values are ignored, fewer are an error. Point-to-point, quantized and collective-pair results are refused: their
latencies are not one collective's.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from collectors.comms.sizes import COLLECTIVES
from collectors.importers.common import (ImportHints, ParsedFile, ParsedRow, collective_from_name, import_error,
                                         normalize_dtype)

FORMAT = "param"

# normalized header name -> field
_FIELDS = {"size(b)": "size", "total-size(b)": "size", "totalsize(b)": "size",
           "nelementsperrank": "elements",
           "latency(us):p50": "p50", "time(us):p50": "p50",
           "p75": "p75", "p95": "p95", "min": "min", "max": "max",
           "algbw(gb/s)": "algbw", "busbw(gb/s)": "busbw",
           "totallatency(us):p50": "total_p50", "totaltime(us):p50": "total_p50"}
_REFUSED = {"nelementspairperrank": "collective-pair results (two overlapped collectives)",
            "pinglatency(us):p50": "point-to-point results", "pingtime(us):p50": "point-to-point results"}
_ALIASES = {"all_gather_base": "all_gather", "reduce_scatter_base": "reduce_scatter",
            "all_to_all_single": "all_to_all"}
_WORLD = re.compile(r"world_size\s*[:=]\s*(\d+)", re.IGNORECASE)


_IGNORED = {"tflops", "complatency(us):p50", "comptime(us):p50"}
_KNOWN = sorted(set(_FIELDS) | set(_REFUSED) | _IGNORED, key=len, reverse=True)


def _unglue(name: str) -> list[str] | None:
    """Split names PARAM printed without a space between them ('busbw(gb/s)totallatency(us):p50'), or None."""
    if not name:
        return []
    for known in _KNOWN:
        if name.startswith(known):
            rest = _unglue(name[len(known):])
            if rest is not None:
                return [known, *rest]
    return None


def _header_names(tokens: list[str]) -> list[str]:
    """Whitespace tokens -> lower-case column names: a '(unit)' token belongs to the name before it, and names
    printed without a space between them (a full-width column) are split apart."""
    glued: list[str] = []
    for token in tokens:
        if token.startswith("(") and glued:
            glued[-1] += token
        else:
            glued.append(token)
    names: list[str] = []
    for name in (g.lower() for g in glued):
        names.extend(_unglue(name) or [name])
    return names


def _columns(path: Path, line: int, names: list[str]) -> dict[str, int]:
    for name in names:
        if name in _REFUSED:
            raise import_error(path, line, f"PARAM {_REFUSED[name]} are not supported: import collective sweeps")
    columns = {_FIELDS[n]: i for i, n in enumerate(names) if n in _FIELDS}
    missing = [f for f in ("size", "p50") if f not in columns]
    if missing:
        raise import_error(path, line, f"COMMS-RES header lacks {' and '.join(missing)} "
                                       f"(found columns: {', '.join(names)})")
    return columns


def _prefix(path: Path, line: int, prefix: str, hints: ImportHints) -> tuple[str, str | None]:
    """(collective, dtype) from 'COMMS-RES[-coll[-dtype[tag]]]', the hints or the file name."""
    parts = prefix[len("COMMS-RES"):].lstrip("-").split("-") if prefix != "COMMS-RES" else []
    stated = _ALIASES.get(parts[0], parts[0]) if parts else None
    if stated and hints.collective and stated != hints.collective:
        raise import_error(path, line, f"the row is {stated} but --collective says {hints.collective}")
    collective = stated or hints.collective or collective_from_name(path)
    if collective is None:
        raise import_error(path, line, "this PARAM output does not name its collective (2021 format): "
                                       "give --collective")
    if collective not in COLLECTIVES:
        raise import_error(path, line, f"PARAM collective {collective!r} is not one pmdb models "
                                       f"(known: {', '.join(COLLECTIVES)})")
    return collective, normalize_dtype(parts[1]) if len(parts) > 1 else None


def _number(path: Path, line: int, text: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise import_error(path, line, f"{name} is {text!r}, not a number") from None
    if not math.isfinite(value) or value < 0:
        raise import_error(path, line, f"{name} is {text!r}: must be a non-negative number")
    return value


def parse(path: Path, text: str, hints: ImportHints) -> ParsedFile:
    """Parse PARAM comms.py stdout (any column variant) into rows."""
    columns: dict[str, int] | None = None
    width = 0
    rows: list[ParsedRow] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped.startswith("COMMS-RES"):
            continue
        tokens = stripped.split()
        prefix, rest = tokens[0], tokens[1:]
        if prefix.startswith("COMMS-RES-QUANT"):
            raise import_error(path, lineno, "quantized PARAM results are not supported")
        if rest and not re.match(r"^\d", rest[0]):
            names = _header_names(rest)
            columns, width = _columns(path, lineno, names), len(names)
            continue
        if columns is None:
            raise import_error(path, lineno, "a COMMS-RES result line before any COMMS-RES header line")
        if len(rest) < width:
            raise import_error(path, lineno, f"{len(rest)} values but the header has {width} columns")
        collective, dtype = _prefix(path, lineno, prefix, hints)
        values = {f: _number(path, lineno, rest[i], f) for f, i in columns.items()}
        if values["p50"] <= 0:
            raise import_error(path, lineno, f"latency p50 is {rest[columns['p50']]}: must be positive")
        if values["size"] != int(values["size"]) or values["size"] < 1:
            raise import_error(path, lineno, f"size {rest[columns['size']]!r} is not a positive whole number of bytes")
        rows.append(ParsedRow(collective=collective, size_bytes=int(values["size"]), lat_us=values["p50"],
                              line=lineno, lat_p95_us=values.get("p95"), lat_min_us=values.get("min"),
                              lat_max_us=values.get("max"), algbw_gbps=values.get("algbw"),
                              busbw_gbps=values.get("busbw"), dtype=dtype))
    stated = {int(m) for m in _WORLD.findall(text)}
    if len(stated) > 1:
        raise import_error(path, None, f"the file states several world sizes {sorted(stated)}")
    return ParsedFile(path=path, format=FORMAT, backend=FORMAT, rows=rows,
                      stated_world_size=stated.pop() if stated else None)
