"""``pmdb collect trace``: import Kineto and execution traces recorded outside pmdb as a trace set."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from collectors.traces.import_set import TraceImport, amend_trace_set, import_traces
from collectors.traces.ingest import PROFILED_WITH, RankTraces
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError
from pmdb.notes import say, wrapped


def _pairs(kineto: list[Path], et: list[Path], ranks: list[int], profiled_with: Optional[str],
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
    if profiled_with is not None and profiled_with not in PROFILED_WITH:
        raise PmdbError(f"bad --profiled-with {profiled_with!r}: use {' or '.join(PROFILED_WITH)}")
    return [RankTraces(ranks[i] if ranks else i, kineto[i] if kineto else None, et[i] if et else None,
                       profiled_with) for i in range(count)]


def trace(ctx: typer.Context,
          kineto: list[Path] = typer.Option([], "--kineto", help="Kineto trace (.json or .json.gz) of one rank; "
                                            "repeat once per rank."),
          et: list[Path] = typer.Option([], "--et", help="Execution trace of the rank whose --kineto has the same "
                                        "position; repeat once per rank (or give only --et files)."),
          rank: list[int] = typer.Option([], "--rank", help="Rank of each file pair, in the same order "
                                         "(default 0, 1, ...; required with --trace-set)."),
          platform: Optional[str] = typer.Option(None, "--platform", help="Platform the traces were recorded on "
                                                 "(default: this machine, when the Kineto trace's host is this "
                                                 "one; else the registered platform of the GPU its "
                                                 "deviceProperties name, e.g. nvidia-h200); a new name of another "
                                                 "machine is registered as an imported platform."),
          measured_ms: Optional[float] = typer.Option(None, "--measured-ms", help="Unprofiled time of one "
                                                      "iteration (ms), timed without the profiler: the truth "
                                                      "model-mode predictions of the set are judged against."),
          threads: Optional[int] = typer.Option(None, "--threads", help="Intra-op threads per rank of the "
                                                "recording (torch.get_num_threads()), when the trace does not "
                                                "record them as metadata 'intra_op_threads'."),
          workload: Optional[str] = typer.Option(None, "--workload", help="Workload label stored with the set."),
          trace_set: Optional[int] = typer.Option(None, "--trace-set", help="Add the ranks to this existing "
                                                  "trace set instead of creating one (without files: set its "
                                                  "--threads / --measured-ms)."),
          profiled_with: Optional[str] = typer.Option(None, "--profiled-with", help="What recorded during the "
                                                      "Kineto pass: 'kineto', or 'kineto+et' when the ET was "
                                                      "recorded in the same pass (overheads skip such traces); "
                                                      "default: found from the files."),
          device_kind: Optional[str] = typer.Option(None, "--device-kind", help="cpu or cuda for a new platform "
                                                    "of another machine (default: cuda when the Kineto trace "
                                                    "has device events)."),
          ) -> None:
    """Import Kineto and/or execution traces (one pair per rank) recorded outside pmdb into a trace set."""
    if trace_set is not None and not kineto and not et:
        with open_store(ctx) as store:
            amend_trace_set(store, trace_set, threads, measured_ms)
        typer.echo(f"trace set {trace_set}: " + "; ".join(
            ([f"{threads} intra-op thread(s)"] if threads is not None else [])
            + ([f"measured {measured_ms:.1f} ms per iteration"] if measured_ms is not None else [])))
        return
    request = TraceImport(_pairs(kineto, et, rank, profiled_with, trace_set is not None), platform=platform,
                          workload=workload, trace_set=trace_set, device_kind=device_kind, threads=threads,
                          measured_ms=measured_ms)
    with open_store(ctx) as store:
        done = import_traces(store, request)
    where = "this machine" if done.local else "imported"
    facts = [f"{done.ranks} rank(s) stored"]
    if done.threads is not None:
        facts.append(f"{done.threads} intra-op thread(s)")
    if done.measured_us is not None:
        facts.append(f"profiled iteration {done.measured_us / 1000:.1f} ms")
    if done.given_measured_us is not None:
        facts.append(f"measured {done.given_measured_us / 1000:.1f} ms")
    typer.echo(wrapped(f"trace set {done.trace_set_id} on platform {done.platform} ({where}): {'; '.join(facts)}"))
    render(done.files)
    for note in done.notes:
        say("note", note)


def register(app: typer.Typer) -> None:
    app.command("trace")(trace)
