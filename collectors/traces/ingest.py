"""Store a trace set: per rank a Kineto trace and/or an execution trace.

Each file is kept gzipped under ``artifacts/traces/<sha256>.json.gz`` and registered in ``traces``; its contents
become rows: Kineto CPU events -> ``trace_ops`` (op_id = start order), device events -> ``trace_kernels``, complete
iterations -> ``trace_iterations``; ET nodes -> ``trace_ops`` (op_id = node id) carrying the timing, thread,
category and parent of their linked Kineto op (see :mod:`collectors.traces.link`). The Kineto rows keep their own
timing: they are what overheads are extracted from. ``trace_sets.measured_us`` is the median over the trace's
complete iterations of the iteration's time over all ranks, from the last rank's entry to the last rank's exit
(the trace's own, profiled, ground truth); ``trace_sets.threads`` and ``given_measured_us`` are what the caller
knows beyond the files (the recording's intra-op threads, its unprofiled iteration time).

Every file of a call is parsed before anything is written, so a malformed file leaves the store untouched, and the
rows of a call are written in one transaction: a write that fails (a full disk) leaves nothing of it behind.
"""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import pandas as pd
from tqdm import tqdm

from collectors.traces.et import EtTrace, parse_et
from collectors.traces.files import TraceFile, read_trace_file, store_artifact
from pmdb.traces.iterations import aligned_iteration_us
from collectors.traces.kineto import KinetoTrace, parse_kineto
from collectors.traces.link import Link, combine, link
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.gc_pause import collector_paused

PROFILED_WITH = ("kineto", "kineto+et")
SOURCES = ("captured", "imported", "derived")
OP_COLUMNS = ["op_id", "name", "parent_id", "thread", "et_tid", "iteration", "start_us", "dur_us", "rf_id",
              "linked_op_id", "category", "is_collective", "input_shapes", "output_shapes", "input_tensors",
              "output_tensors", "attrs"]


@dataclass
class RankTraces:
    """The trace files of one rank."""

    rank: int
    kineto: Path | None          # Kineto JSON (.json or .json.gz)
    et: Path | None              # execution trace JSON (.json or .json.gz)
    profiled_with: str | None = "kineto"  # what was recording during the Kineto pass: 'kineto' or 'kineto+et';
    # None: found out (kineto+et when the ET links to the Kineto trace by record-function id from the same process)


@dataclass
class ParsedRank:
    """One rank's files read and parsed (nothing written yet); ``profiled_with`` is settled."""

    spec: RankTraces
    kineto_file: TraceFile | None
    kineto: KinetoTrace | None
    et_file: TraceFile | None
    et: EtTrace | None
    link: Link | None = None
    et_rows: pd.DataFrame | None = None
    kineto_twins: pd.Series | None = None


@collector_paused()   # a rank's parse, link and combine allocate 10^6 acyclic containers (pmdb.traces.gc_pause)
def _parse(spec: RankTraces) -> ParsedRank:
    if spec.kineto is None and spec.et is None:
        raise PmdbError(f"rank {spec.rank}: give a Kineto trace, an execution trace or both")
    if spec.profiled_with is not None and spec.profiled_with not in PROFILED_WITH:
        raise PmdbError(f"rank {spec.rank}: bad profiled_with {spec.profiled_with!r}: use {' or '.join(PROFILED_WITH)}")
    kfile = read_trace_file(spec.kineto) if spec.kineto is not None else None
    efile = read_trace_file(spec.et) if spec.et is not None else None
    kineto = parse_kineto(kfile.doc, str(kfile.path)) if kfile else None
    et = parse_et(efile.doc, str(efile.path)) if efile else None
    # the decoded JSON (~10x the file) is dropped once parsed: a set of many ranks holds only their rows until stored
    parsed = ParsedRank(spec, _bytes_only(kfile), kineto, _bytes_only(efile), et)
    if parsed.et is not None:
        if parsed.kineto is not None:
            parsed.link = link(parsed.et.nodes, parsed.kineto.ops, parsed.kineto.iterations)
            parsed.et_rows, parsed.kineto_twins = combine(parsed.et.nodes, parsed.kineto.ops, parsed.link)
        else:
            parsed.et_rows = parsed.et.nodes.assign(linked_op_id=pd.NA, start_us=float("nan"),
                                                    dur_us=float("nan"), thread=pd.NA)
    if spec.profiled_with is None:
        spec.profiled_with = "kineto+et" if joint_pass(parsed) else "kineto"
    return parsed


def _bytes_only(trace: TraceFile | None) -> TraceFile | None:
    return None if trace is None else dataclasses.replace(trace, doc=None)


def joint_pass(parsed: ParsedRank) -> bool:
    """Whether the rank's ET was recorded in the same pass as its Kineto trace: the same process, and linked by
    record-function id (ids count up in a process, so separate passes of one process never share them)."""
    if parsed.link is None or parsed.link.method != "rf_id" or parsed.et.pid is None:
        return False
    return int(parsed.et.pid) in set(parsed.kineto.ops["process"].dropna().astype(int))


def parse_ranks(ranks: Sequence[RankTraces | ParsedRank]) -> list[ParsedRank]:
    """Every rank's files read and parsed (ranks already parsed are kept); nothing is written."""
    if ranks and all(isinstance(r, ParsedRank) for r in ranks):
        return list(ranks)  # type: ignore[arg-type]
    return _parse_all([r.spec if isinstance(r, ParsedRank) else r for r in ranks])


def _parse_all(ranks: list[RankTraces]) -> list[ParsedRank]:
    if not ranks:
        raise PmdbError("a trace set needs at least one rank")
    numbers = [r.rank for r in ranks]
    if any(not isinstance(n, int) or n < 0 for n in numbers):
        raise PmdbError(f"ranks must be integers >= 0, got {numbers}")
    if len(set(numbers)) != len(numbers):
        raise PmdbError(f"each rank may appear once in a trace set, got {numbers}")
    return [_parse(spec) for spec in tqdm(ranks, desc="parsing traces", unit="rank", disable=None)]


def ingest_trace_set(store: Store, run_id: str, platform: str, ranks: Sequence[RankTraces | ParsedRank], *,
                     label: str | None = None, workload_id: int | None = None, source: str = "captured",
                     threads: int | None = None, given_measured_us: float | None = None) -> int:
    """Store the traces of ``ranks`` as a new trace set of ``platform`` written by run ``run_id``, in one
    transaction; returns its id. ``threads``: intra-op threads per rank of the recording; ``given_measured_us``: its
    unprofiled iteration time (µs)."""
    if source not in SOURCES:
        raise PmdbError(f"bad trace-set source {source!r}: use {', '.join(SOURCES)}")
    platforms.load(store, platform)  # refuses an unknown name
    parsed = parse_ranks(ranks)
    with store.transaction():
        set_id = store.insert_one("trace_sets", {
            "run_id": run_id, "platform": platform, "label": label, "workload_id": workload_id,
            "world_size": _world_size(parsed, 0), "source": source, "threads": threads,
            "given_measured_us": given_measured_us}, returning="trace_set_id")
        for item in parsed:
            _store_rank(store, run_id, set_id, item, platform, source)
        update_measured(store, set_id)
    return int(set_id)


def add_ranks(store: Store, run_id: str, trace_set_id: int, ranks: Sequence[RankTraces | ParsedRank], *,
              threads: int | None = None, given_measured_us: float | None = None) -> None:
    """Add ranks to an existing trace set (their rows belong to run ``run_id``), in one transaction; ``threads`` and
    ``given_measured_us`` replace the set's when given."""
    row = store.query("SELECT s.platform, s.source, s.world_size, r.status FROM trace_sets s "
                      "JOIN collection_runs r USING (run_id) WHERE s.trace_set_id = ?", [trace_set_id])
    if row.empty:
        raise PmdbError(f"no trace set {trace_set_id}")
    if row.at[0, "status"] != "completed":
        raise PmdbError(f"trace set {trace_set_id} belongs to a run that is {row.at[0, 'status']}, not completed")
    held = set(store.query("SELECT DISTINCT t.rank FROM traces t JOIN collection_runs r USING (run_id) "
                           "WHERE t.trace_set_id = ? AND r.status = 'completed'", [trace_set_id])["rank"])
    clash = sorted(held & {(r.spec if isinstance(r, ParsedRank) else r).rank for r in ranks})
    if clash:
        raise PmdbError(f"trace set {trace_set_id} already holds rank(s) {clash}")
    parsed = parse_ranks(ranks)
    platform, source = row.at[0, "platform"], row.at[0, "source"]
    with store.transaction():
        for item in parsed:
            _store_rank(store, run_id, trace_set_id, item, platform, source)
        store.conn.execute("UPDATE trace_sets SET world_size = ?, threads = coalesce(?, threads), "
                           "given_measured_us = coalesce(?, given_measured_us) WHERE trace_set_id = ?",
                           [max(int(row.at[0, "world_size"]), _world_size(parsed, max(held, default=-1) + 1)),
                            threads, given_measured_us, trace_set_id])
        update_measured(store, trace_set_id)


def _world_size(parsed: list[ParsedRank], floor: int) -> int:
    sizes = [floor] + [p.spec.rank + 1 for p in parsed]
    sizes += [p.kineto.world_size for p in parsed if p.kineto is not None and p.kineto.world_size]
    return max(sizes)


def check_not_imported(store: Store, parsed: Sequence[ParsedRank]) -> None:
    """Refuse files whose content a completed import already stored (before anything, a platform too, is
    written)."""
    for item in parsed:
        for trace in (item.kineto_file, item.et_file):
            if trace is not None:
                _refuse_imported(store, trace, None)


def _refuse_imported(store: Store, trace: TraceFile, run_id: str | None) -> pd.DataFrame:
    held = store.query("SELECT f.path, f.run_id, r.status FROM imported_files f JOIN collection_runs r "
                       "USING (run_id) WHERE f.sha256 = ?", [trace.sha256])
    if not held.empty and (held.at[0, "status"] == "completed" or held.at[0, "run_id"] == run_id):
        raise PmdbError(f"{trace.path}: this content was already imported "
                        f"(from {held.at[0, 'path']}, sha256 {trace.sha256[:12]})")
    return held


def _register_file(store: Store, run_id: str, trace: TraceFile, fmt: str, platform: str, source: str) -> str:
    if source == "imported":
        held = _refuse_imported(store, trace, run_id)
        if not held.empty:
            store.conn.execute("DELETE FROM imported_files WHERE sha256 = ?", [trace.sha256])  # a run that died
        store.insert_one("imported_files", {"sha256": trace.sha256, "run_id": run_id, "path": str(trace.path),
                                            "format": fmt, "platform": platform, "size_bytes": trace.size_bytes})
    return store_artifact(store.workspace, trace)


def _trace_row(store: Store, run_id: str, set_id: int, rank: int, kind: str, trace: TraceFile, path: str,
               **extra) -> int:
    return int(store.insert_one("traces", {
        "trace_set_id": set_id, "run_id": run_id, "rank": rank, "kind": kind, "sha256": trace.sha256,
        "path": path, "size_bytes": trace.size_bytes, **extra}, returning="trace_id"))


@collector_paused()   # the rank's frames hold 10^5 containers in object columns
def _store_rank(store: Store, run_id: str, set_id: int, item: ParsedRank, platform: str, source: str) -> None:
    rank, spec = item.spec.rank, item.spec
    if item.kineto is not None:
        path = _register_file(store, run_id, item.kineto_file, "kineto", platform, source)
        trace_id = _trace_row(store, run_id, set_id, rank, "kineto", item.kineto_file, path,
                              schema_version=item.kineto.version, profiled_with=spec.profiled_with,
                              iterations=len(item.kineto.iterations))
        ops = item.kineto.ops.assign(et_tid=None, output_shapes=None, input_tensors=None, output_tensors=None,
                                     linked_op_id=item.kineto_twins if item.kineto_twins is not None else None)
        store.insert("trace_ops", ops[OP_COLUMNS].assign(trace_id=trace_id))
        store.insert("trace_kernels", item.kineto.kernels.assign(trace_id=trace_id))
        store.insert("trace_iterations", item.kineto.iterations.assign(trace_id=trace_id))
    if item.et is not None:
        path = _register_file(store, run_id, item.et_file, "et", platform, source)
        linked = item.link.et_to_kineto if item.link else {}
        trace_id = _trace_row(store, run_id, set_id, rank, "et", item.et_file, path,
                              schema_version=item.et.version, iterations=item.et.iterations,
                              profiled_with="kineto+et" if spec.profiled_with == "kineto+et" else "et",
                              link_method=item.link.method if item.link else None, linked_ops=len(linked))
        store.insert("trace_ops", item.et_rows[OP_COLUMNS].assign(trace_id=trace_id))


def update_measured(store: Store, trace_set_id: int) -> float | None:
    """Set trace_sets.measured_us: median over iterations (aligned by position) of the iteration's time over all ranks
    (:func:`~pmdb.traces.iterations.aligned_iteration_us`)."""
    frame = store.query("SELECT t.rank, i.start_us, i.dur_us FROM trace_iterations i JOIN traces t USING (trace_id) "
                        "JOIN collection_runs r ON r.run_id = t.run_id "
                        "WHERE t.trace_set_id = ? AND t.kind = 'kineto' AND r.status IN ('completed', 'running') "
                        "ORDER BY t.rank, i.iteration", [trace_set_id])
    per_rank = [(g["start_us"].tolist(), g["dur_us"].tolist()) for _, g in frame.groupby("rank")]
    count = min((len(d) for _, d in per_rank), default=0)
    measured = statistics.median(aligned_iteration_us([s[i] for s, _ in per_rank], [d[i] for _, d in per_rank])
                                 for i in range(count)) if count else None
    store.conn.execute("UPDATE trace_sets SET measured_us = ? WHERE trace_set_id = ?", [measured, trace_set_id])
    return measured
