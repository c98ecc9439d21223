"""``pmdb collect trace``: import Kineto and execution traces recorded elsewhere as a trace set."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from collectors.traces.files import read_trace_file
from collectors.traces.ingest import PROFILED_WITH, RankTraces, add_ranks, ingest_trace_set
from pmdb.traces.vocabulary import common
from pmdb import platform as platforms
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError
from pmdb.store import Store


def _pairs(kineto: list[Path], et: list[Path], ranks: list[int], profiled_with: str,
           adding: bool) -> list[RankTraces]:
    count = max(len(kineto), len(et))
    if count == 0:
        raise PmdbError("give at least one --kineto (and/or --et) trace file")
    for flag, values in (("--kineto", kineto), ("--et", et), ("--rank", ranks)):
        if values and len(values) != count:
            raise PmdbError(f"{flag} is given {len(values)} time(s) but there are {count} rank(s): repeat --kineto, "
                            f"--et and --rank once per rank, in the same order")
    if adding and not ranks:
        raise PmdbError("--trace-set adds ranks to an existing set: say which with --rank")
    if profiled_with not in PROFILED_WITH:
        raise PmdbError(f"bad --profiled-with {profiled_with!r}: use {' or '.join(PROFILED_WITH)}")
    return [RankTraces(ranks[i] if ranks else i, kineto[i] if kineto else None, et[i] if et else None,
                       profiled_with) for i in range(count)]


def _platform(store: Store, name: str, device_kind: Optional[str], pairs: list[RankTraces]) -> str:
    """The named platform; a new one is registered as imported, its device kind read from the first Kineto trace."""
    if store.scalar("SELECT count(*) FROM platforms WHERE name = ?", [name]):
        return name
    if device_kind is None:
        first = next((p.kineto for p in pairs if p.kineto is not None), None)
        device_kind = "cpu"
        if first is not None:
            device = common().categories["device"]
            events = read_trace_file(first).doc.get("traceEvents")
            if isinstance(events, list) and any(isinstance(e, dict) and e.get("cat") in device for e in events):
                device_kind = "cuda"
    return platforms.ensure_named(store, name, device_kind=device_kind)


def trace(ctx: typer.Context,
          kineto: list[Path] = typer.Option([], "--kineto", help="Kineto trace (.json or .json.gz) of one rank; "
                                            "repeat once per rank."),
          et: list[Path] = typer.Option([], "--et", help="Execution trace of the rank whose --kineto has the same "
                                        "position; repeat once per rank (or give only --et files)."),
          rank: list[int] = typer.Option([], "--rank", help="Rank of each file pair, in the same order "
                                         "(default 0, 1, ...; required with --trace-set)."),
          platform: str = typer.Option(..., "--platform", help="Platform the traces were recorded on; a new name is "
                                       "registered as an imported platform."),
          workload: Optional[str] = typer.Option(None, "--workload", help="Workload label stored with the set."),
          trace_set: Optional[int] = typer.Option(None, "--trace-set", help="Add the ranks to this existing "
                                                  "trace set instead of creating one."),
          profiled_with: str = typer.Option("kineto", "--profiled-with", help="What recorded during the Kineto "
                                            "pass: 'kineto', or 'kineto+et' when the ET was recorded in the same "
                                            "pass (overheads skip such traces)."),
          device_kind: Optional[str] = typer.Option(None, "--device-kind", help="cpu or cuda for a new platform "
                                                    "(default: cuda when the Kineto trace has device events)."),
          ) -> None:
    """Import Kineto and/or execution traces (one pair per rank) recorded elsewhere into a trace set."""
    pairs = _pairs(kineto, et, rank, profiled_with, trace_set is not None)
    with open_store(ctx) as store:
        name = _platform(store, platforms.check_name(platform), device_kind, pairs)
        args = {"kineto": [str(p) for p in kineto], "et": [str(p) for p in et], "rank": rank, "workload": workload,
                "trace_set": trace_set, "profiled_with": profiled_with}
        with store.run("trace", name, args) as run:
            if trace_set is None:
                set_id = ingest_trace_set(store, run.run_id, name, pairs, label=workload, source="imported")
            else:
                set_id = trace_set
                add_ranks(store, run.run_id, trace_set, pairs)
            summary = store.query(
                "SELECT t.rank, t.kind, t.schema_version AS schema, "
                "(SELECT count(*) FROM trace_ops o WHERE o.trace_id = t.trace_id) AS ops, "
                "(SELECT count(*) FROM trace_kernels k WHERE k.trace_id = t.trace_id) AS kernels, "
                "t.iterations, t.link_method, t.linked_ops FROM traces t "
                "WHERE t.trace_set_id = ? AND t.run_id = ? ORDER BY t.rank, t.kind", [set_id, run.run_id])
            run.summary = {"trace_set_id": set_id, "files": len(summary), "ops": int(summary["ops"].sum())}
        measured = store.scalar("SELECT measured_us FROM trace_sets WHERE trace_set_id = ?", [set_id])
    typer.echo(f"trace set {set_id} on platform {name}: {len(pairs)} rank(s) stored"
               + (f"; median iteration in the trace {measured:.1f} µs" if measured is not None else ""))
    render(summary)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
