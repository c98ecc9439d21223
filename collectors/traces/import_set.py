"""``pmdb collect trace`` as one stage function: traces recorded outside pmdb become a trace set (or ranks added to
one), on the platform they were recorded on (:mod:`collectors.traces.origin`), with what the files cannot say: the
recording's intra-op threads and its unprofiled iteration time (µs).

Every file is parsed and the platform chosen before the run starts; the set's rows are written in one transaction.
A write that fails (a full disk) fails the run with one line and keeps nothing of it.
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any

import duckdb
import pandas as pd

from collectors.traces.files import ArtifactWriteError
from collectors.traces.ingest import RankTraces, add_ranks, check_not_imported, ingest_trace_set, parse_ranks
from collectors.traces.kineto import read_header
from collectors.traces.origin import THREADS_KEY, choose_platform, plan_platform, recorded_threads
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store, StoreWriteError

_FULL_WORDS = ("no space", "too large", "could not write", "disk full", "disk quota")
_FULL_ERRNOS = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)


@dataclass
class TraceImport:
    """What ``pmdb collect trace`` was asked to import."""

    ranks: list[RankTraces]
    platform: str | None = None        # None: this machine, when the traces say they were recorded here
    workload: str | None = None        # label stored with the set
    trace_set: int | None = None       # add the ranks to this set instead of creating one
    device_kind: str | None = None     # a new platform of another machine: cpu or cuda
    threads: int | None = None         # intra-op threads of the recording, when the traces do not record them
    measured_ms: float | None = None   # unprofiled iteration time of the recording, ms


@dataclass
class ImportedSet:
    """The stored trace set and what to tell the user."""

    run_id: str
    trace_set_id: int
    platform: str
    local: bool                          # the platform is this machine
    ranks: int
    files: pd.DataFrame                  # one row per stored file: rank, kind, schema, ops, kernels, ...
    threads: int | None
    measured_us: float | None            # the trace's own (profiled) median iteration
    given_measured_us: float | None      # --measured-ms, µs
    notes: list[str] = field(default_factory=list)


def _write_failed(exc: BaseException) -> bool:
    """Whether an error is a write the disk refused (full disk, file size limit, quota), not a mistake."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc.errno in _FULL_ERRNOS
    return isinstance(exc, (OSError, duckdb.Error)) and any(w in str(exc).lower() for w in _FULL_WORDS)


def _check(request: TraceImport) -> None:
    if request.threads is not None and request.threads < 1:
        raise PmdbError(f"bad --threads {request.threads}: give the intra-op thread count (>= 1)")
    if request.measured_ms is not None and not request.measured_ms > 0:
        raise PmdbError(f"bad --measured-ms {request.measured_ms}: give the unprofiled iteration time in ms (> 0)")
    if request.device_kind is not None and request.device_kind not in tuple(platforms.DeviceKind):
        raise PmdbError(f"bad --device-kind {request.device_kind!r}: use cpu or cuda")


def _existing_set(store: Store, trace_set_id: int, name: str | None, threads: int | None) -> tuple[str, bool]:
    row = store.query("SELECT s.platform, s.threads, p.is_imported FROM trace_sets s JOIN platforms p "
                      "ON p.name = s.platform WHERE s.trace_set_id = ?", [trace_set_id])
    if row.empty:
        raise PmdbError(f"no trace set {trace_set_id}")
    platform, held = str(row.at[0, "platform"]), row.at[0, "threads"]
    if name is not None and name != platform:
        raise PmdbError(f"trace set {trace_set_id} is of platform {platform!r}, not {name!r}")
    if threads is not None and not pd.isna(held) and int(held) != threads:
        raise PmdbError(f"trace set {trace_set_id} was recorded with {int(held)} intra-op thread(s), "
                        f"the new ranks with {threads}")
    return platform, not bool(row.at[0, "is_imported"])


def amend_trace_set(store: Store, trace_set_id: int, threads: int | None, measured_ms: float | None) -> None:
    """Set an existing trace set's intra-op threads and unprofiled iteration time (ms) without adding files."""
    if threads is None and measured_ms is None:
        raise PmdbError("give trace files to add (--kineto/--et with --rank), or --threads / --measured-ms to set")
    _check(TraceImport([], threads=threads, measured_ms=measured_ms))
    _existing_set(store, trace_set_id, None, None)
    store.conn.execute("UPDATE trace_sets SET threads = coalesce(?, threads), given_measured_us = coalesce(?, "
                       "given_measured_us) WHERE trace_set_id = ?",
                       [threads, None if measured_ms is None else measured_ms * 1000.0, trace_set_id])


def import_traces(store: Store, request: TraceImport) -> ImportedSet:
    """Parse, choose the platform, and store the traces of ``request`` in one 'trace' run."""
    _check(request)
    if request.trace_set is None:  # a refusal from the files' metadata, before their events are parsed
        _early_plan(store, request)
    parsed = parse_ranks(request.ranks)  # every file read and checked before anything is written
    check_not_imported(store, parsed)
    kinetos = [(str(p.spec.kineto), p.kineto) for p in parsed if p.kineto is not None]
    threads = recorded_threads(kinetos, request.threads)
    if request.trace_set is not None:
        name, local = _existing_set(store, request.trace_set, request.platform, threads)
    else:
        choice = choose_platform(store, request.platform, kinetos, request.device_kind)
        name, local = choice.name, choice.local
    given = None if request.measured_ms is None else request.measured_ms * 1000.0
    args = {"kineto": [str(r.kineto) for r in request.ranks if r.kineto], "et": [str(r.et) for r in request.ranks
            if r.et], "rank": [r.rank for r in request.ranks], "workload": request.workload,
            "trace_set": request.trace_set, "profiled_with": [p.spec.profiled_with for p in parsed],
            "threads": threads, "measured_ms": request.measured_ms}
    with store.run("trace", name, args) as run:
        try:
            if request.trace_set is None:
                set_id = ingest_trace_set(store, run.run_id, name, parsed, label=request.workload,
                                          source="imported", threads=threads, given_measured_us=given)
            else:
                set_id = request.trace_set
                add_ranks(store, run.run_id, set_id, parsed, threads=threads, given_measured_us=given)
        except Exception as exc:
            if isinstance(exc, ArtifactWriteError) and not _write_failed(exc):
                raise PmdbError(f"cannot store a copy of the trace: {exc.strerror}") from None
            if not _write_failed(exc):
                raise
            text = exc.strerror if isinstance(exc, ArtifactWriteError) else str(exc)
            first = (str(text).strip().splitlines() or [""])[0][:300]
            raise StoreWriteError(f"run {run.run_id} (trace) failed: storing the traces failed ({first}); "
                                  f"nothing of it was kept: free disk space, then re-run") from None
        files = store.query(
            "SELECT t.rank, t.kind, t.schema_version AS schema, t.profiled_with, "
            "(SELECT count(*) FROM trace_ops o WHERE o.trace_id = t.trace_id) AS ops, "
            "(SELECT count(*) FROM trace_kernels k WHERE k.trace_id = t.trace_id) AS kernels, "
            "t.iterations, t.link_method, t.linked_ops FROM traces t "
            "WHERE t.trace_set_id = ? AND t.run_id = ? ORDER BY t.rank, t.kind", [set_id, run.run_id])
        run.summary = {"trace_set_id": int(set_id), "files": len(files), "ops": int(files["ops"].sum())}
    row = store.query("SELECT measured_us, threads, given_measured_us FROM trace_sets WHERE trace_set_id = ?",
                      [set_id]).iloc[0]
    out = ImportedSet(run.run_id, int(set_id), name, local, len(parsed), files,
                      None if pd.isna(row["threads"]) else int(row["threads"]), _float(row["measured_us"]),
                      _float(row["given_measured_us"]))
    out.notes = _notes(store, out, parsed)
    return out


def _early_plan(store: Store, request: TraceImport) -> None:
    """Refuse an import whose platform the Kineto headers already rule out (no host, an unregistered GPU), in a
    fraction of a second; a file whose header cannot be read is left to the full parse and its error."""
    headers = []
    for spec in request.ranks:
        if spec.kineto is None:
            continue
        try:
            headers.append((str(spec.kineto), read_header(str(spec.kineto))))
        except PmdbError:
            return
    try:
        plan_platform(store, request.platform, headers, request.device_kind)
    except PmdbError:
        if all(header.devices for _, header in headers):
            raise
        # a header without deviceProperties may still hold kernels (a GPU): the parsed trace decides


def _float(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _notes(store: Store, done: ImportedSet, parsed: list) -> list[str]:
    notes = []
    joint = [p.spec.rank for p in parsed if p.spec.profiled_with == "kineto+et" and p.et is not None]
    if joint:
        notes.append(f"rank(s) {', '.join(map(str, joint))}: the execution trace was recorded in the same pass as "
                     f"the Kineto trace, which it slows: `pmdb fit overheads` leaves such traces out unless "
                     f"--include-joint")
    if done.threads is None and platforms.load(store, done.platform).sync_host:
        notes.append(f"the traces do not record their intra-op thread count (Kineto metadata {THREADS_KEY}): "
                     f"give it with `pmdb collect trace --trace-set {done.trace_set_id} --threads N` so that "
                     f"`collect ops --from-trace-set` and `predict` use it")
    if done.given_measured_us is None:
        notes.append(f"no --measured-ms: predictions of trace set {done.trace_set_id} are judged against its "
                     f"profiled iteration, which the profiler slows (`pmdb collect trace --trace-set "
                     f"{done.trace_set_id} --measured-ms X` gives the unprofiled time)")
    return notes
