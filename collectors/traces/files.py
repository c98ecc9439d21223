"""Trace files: reading (plain or gzipped JSON, malformed files refused) and content-addressed storage under the
workspace's ``artifacts/traces/<sha256>.json.gz`` (sha256 of the uncompressed content; a gzipped file is stored as
its own bytes, a plain one compressed)."""
from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.traces.gc_pause import collector_paused

GZIP_MAGIC = b"\x1f\x8b"


class ArtifactWriteError(OSError):
    """A trace file could not be written under the workspace (disk full, I/O error); the message is one line."""


@dataclass(frozen=True)
class TraceFile:
    """A trace file read into memory: its parsed JSON, raw (uncompressed) bytes and their sha256; ``gzipped``: the
    file's own bytes when it was gzipped (they decompress to ``raw``)."""

    path: Path
    raw: bytes
    doc: Any
    gzipped: bytes | None = None

    @functools.cached_property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def size_bytes(self) -> int:
        return len(self.raw)


def read_trace_file(path: str | os.PathLike) -> TraceFile:
    """Read a .json or .json.gz trace (gzip is detected by content); refuse missing, empty or non-JSON files."""
    path = Path(path)
    if not path.is_file():
        raise PmdbError(f"no such trace file: {path}")
    data = gzipped = path.read_bytes()
    if data[:2] == GZIP_MAGIC:
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise PmdbError(f"{path}: corrupt gzip data ({exc})") from None
    else:
        gzipped = None
    if not data.strip():
        raise PmdbError(f"{path}: the file is empty")
    try:
        with collector_paused():   # 10^6 acyclic containers: collections would cost 3-4x the decoding
            doc = json.loads(data)
    except UnicodeDecodeError:
        raise PmdbError(f"{path}: binary content, not JSON (protobuf Chakra traces are not supported)") from None
    except json.JSONDecodeError as exc:
        raise PmdbError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    if not isinstance(doc, dict):
        raise PmdbError(f"{path}: a trace must be a JSON object, found a {type(doc).__name__}")
    return TraceFile(path, data, doc, gzipped)


def read_top_level(path: str | os.PathLike, list_key: str) -> dict:
    """A JSON trace's top-level members other than its big ``list_key`` list (a Kineto trace's metadata: host,
    devices, distributed info), read from the text before and after that list without parsing its events; a file
    that is not laid out so (or is malformed) is read whole, with :func:`read_trace_file`'s checks and errors."""
    path = Path(path)
    try:
        data = path.read_bytes()
        if data[:2] == GZIP_MAGIC:
            data = gzip.decompress(data)
        start = data.find(b'"' + list_key.encode() + b'"')
        head = data[:start].strip().rstrip(b",").rstrip()
        if start < 0 or not head.startswith(b"{"):
            raise ValueError("no event list")
        found = json.loads(head + b"}") if head != b"{" else {}
        found.update(_after_list(data))
        return found
    except (OSError, EOFError, zlib.error, ValueError):
        return {k: v for k, v in read_trace_file(path).doc.items() if k != list_key}


def _after_list(data: bytes, tries: int = 256) -> dict:
    """The members after the top-level event list: the first ']' from the end whose remainder parses as the rest
    of the object (a ']' inside the list leaves the list's own ']' unbalanced, so it never parses)."""
    end = len(data)
    for _ in range(tries):
        end = data.rfind(b"]", 0, end)
        if end < 0:
            break
        rest = data[end + 1:].lstrip().lstrip(b",")
        try:
            found = json.loads(b"{" + rest)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return {}


def store_artifact(workspace: Workspace, trace: TraceFile) -> str:
    """Write the trace gzipped under artifacts/traces/ (once per content); returns its path relative to the
    workspace."""
    relative = Path("artifacts") / "traces" / f"{trace.sha256}.json.gz"
    target = workspace.home / relative
    if not target.exists():
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if trace.gzipped is not None:   # the file's own gzip: no second compression (a second per 50 MB)
                tmp.write_bytes(trace.gzipped)
            else:
                with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6) as fh:
                    fh.write(trace.raw)
            tmp.replace(target)
        except OSError as exc:  # a full disk: one error, not the chain gzip's close raises on top of it
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise ArtifactWriteError(exc.errno, f"{target}: {exc.strerror or exc}") from None
    return str(relative)
