"""``pmdb collect workload``: resolve the shape, run it on N ranks, store the ground truth and hand the traces over.

With ``repeats`` > 1 the ground truth is measured in that many launches of fresh rank processes, one after the other
(the first also records the traces): on a shared 2-core VM one launch's median step can differ from the next one's
by ~10%, so the stored time is the median of the launches' medians. Nothing is written for a failed run except its
failed ``collection_runs`` row: the workload row, the ground truth and the traces are stored only after every rank
of every launch finished. Rank logs and raw traces live in ``artifacts/tmp/<run_id>``
while the run lasts; a failed run removes them (a rank that failed keeps its log, named in the error), and
`pmdb doctor` reports (``--repair`` removes) what a killed run left there.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from collectors.launch import RankFailed
from collectors.workloads.allocator import allocator_env, allocator_record
from collectors.workloads.dlrm_presets import DlrmConfig
from collectors.workloads.ground_truth import launch_median_us
from collectors.workloads.runner import launch
from collectors.workloads.store_rows import ensure_workload, write_ground_truth
from collectors.workloads.transformer_shape import TransformerConfig
from collectors.workloads.worker import WorkloadJob, run_rank
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store


# Launches stop early (after ``min_repeats``) once the launch medians lie within this share of their median: the
# median of medians then cannot move by more than half of it, well inside the 5-10% the predictions are judged at.
LAUNCH_TOLERANCE = 0.03


def launches_agree(medians_us: list[float], tolerance: float) -> bool:
    """Whether launch medians (µs) lie within ``tolerance`` x their median of each other ((max - min) / median)."""
    middle = sorted(medians_us)[len(medians_us) // 2]
    return middle > 0 and (max(medians_us) - min(medians_us)) / middle <= tolerance


@dataclass(frozen=True)
class WorkloadRequest:
    """A resolved workload run: shape, placement and measurement settings."""

    family: str
    config: DlrmConfig | TransformerConfig
    batch_size: int
    world_size: int
    iters: int = 30
    warmup: int = 5
    threads: int = 1
    seed: int = 0
    sharder: str | None = None
    plan: tuple[int, ...] | None = None
    task_id: int | None = None
    trace_iters: int = 3
    device: str = "cpu"
    timeout_s: float | None = None
    repeats: int = 1
    min_repeats: int | None = None  # stop after this many launches once their medians agree (None: all repeats)
    launch_tolerance: float = LAUNCH_TOLERANCE

    @property
    def name(self) -> str:
        return self.config.name if self.family == "dlrm" else self.config.arch


def start_ranks() -> None:
    """Start the fork server of the workload ranks now, under the allocator settings its launches use: its imports
    (torch and the workload modules, ~8 s on a 2-core host) overlap what the caller does before
    :func:`collect_workload` (checking the request and detecting the platform import torch in this process too)."""
    from collectors.workloads.runner import prestart

    prestart(allocator_env())


def collect_workload(store: Store, platform: str, request: WorkloadRequest, args: dict[str, Any]) -> dict[str, Any]:
    """Run the workload under a 'workload' collection run; returns the run summary."""
    if platforms.load(store, platform).is_imported:
        raise PmdbError(f"platform {platform!r} holds imported data; measure under this machine's platform")
    env = allocator_env()
    with store.run("workload", platform, args) as run, run_folder(store, run.run_id) as work:
        run.summary = _launch_and_store(store, run.run_id, platform, request, job_of(request, work), env, work)
    return run.summary


def job_of(request: WorkloadRequest, trace_dir: Path | None) -> WorkloadJob:
    """What each rank of one launch of ``request`` runs (its traces, if any, go to ``trace_dir``)."""
    return WorkloadJob(request.family, request.config, request.batch_size, request.world_size, request.seed,
                       request.iters, request.warmup, request.threads, request.plan, request.trace_iters,
                       None if trace_dir is None else str(trace_dir), request.device)


@contextlib.contextmanager
def run_folder(store: Store, run_id: str) -> Iterator[Path]:
    """``artifacts/tmp/<run_id>``, the run's rank logs and raw traces while it lasts: removed when the block ends;
    after a failed rank only its logs stay (the error names them), after any other failure nothing."""
    work = store.workspace.artifacts / "tmp" / run_id
    work.mkdir(parents=True, exist_ok=True)
    try:
        yield work
    except RankFailed:
        clean_work(work, keep_logs=True)   # the error names the rank logs: keep those, drop the traces
        raise
    except BaseException:
        clean_work(work, keep_logs=False)  # a full disk, Ctrl-C: nothing of the run's temporary files stays
        raise
    shutil.rmtree(work, ignore_errors=True)


def clean_work(work: Path, *, keep_logs: bool) -> None:
    """Remove a failed run's temporary files (raw traces); with ``keep_logs`` its rank logs stay (``rank*.log``)."""
    if not keep_logs:
        shutil.rmtree(work, ignore_errors=True)
        return
    for path in sorted(work.rglob("*"), reverse=True):
        if path.is_file() and not (path.parent == work and path.name.startswith("rank") and path.suffix == ".log"):
            path.unlink(missing_ok=True)
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _launch_and_store(store: Store, run_id: str, platform: str, request: WorkloadRequest, job: WorkloadJob,
                      env: dict[str, str], work: Path) -> dict[str, Any]:
    """Every launch of the workload's ranks, then the stored rows; returns the run summary."""
    launches = []
    for k in range(request.repeats):
        this = job if k == 0 else replace(job, trace_iters=0)
        label = request.name if request.repeats == 1 else f"{request.name} {k + 1}/{request.repeats}"
        launches.append(launch_ranks(request, this, env, work, label))
        if request.min_repeats is not None and k + 1 >= request.min_repeats and k + 1 < request.repeats and \
                launches_agree([launch_median_us(r) for r in launches], request.launch_tolerance):
            break  # the spread is already small: more launches would not move the median of medians
    return _store(store, run_id, platform, request, launches, allocator_record(launches[0][0]["allocator_env"]))


def launch_ranks(request: WorkloadRequest, job: WorkloadJob, env: dict[str, str], work: Path,
                 label: str) -> list[dict[str, Any]]:
    """One launch of the request's ranks (``label`` on the progress bar); their results in rank order, or
    :class:`RankFailed` naming the rank logs in ``work``."""
    try:
        return launch(run_rank, request.world_size, job, start_env=env,
                      rank_env={"OMP_NUM_THREADS": str(request.threads)}, log_dir=work,
                      timeout_s=request.timeout_s, progress=(label, job.total_steps))
    except RankFailed as exc:
        raise RankFailed(exc.rank, f"{exc.message} (rank logs: {work})", exc.details,
                         user_mistake=exc.user_mistake) from None


PROBE_KEYS = ("memory_probe", "wake_probe")   # the probes a rank takes around its iterations


def rank0_probes(launches: list[list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    """Rank 0's probes of every launch, before and after its iterations, per kind: its memory pace and the LLC it
    found (collectors.memory_probe) and its compute pace (collectors.wake_probe on one thread)."""
    return {key: [probe for launch in launches for r in launch if r["rank"] == 0 for probe in r.get(key, [])]
            for key in PROBE_KEYS}


def _store(store: Store, run_id: str, platform: str, request: WorkloadRequest,
           launches: list[list[dict[str, Any]]], allocator: dict[str, Any]) -> dict[str, Any]:
    """Write the workload row, every rank's ground truth (``launches``: the ranks' results per launch) and, with
    traces, the trace set; returns the run summary."""
    results = launches[0]
    workload_id = ensure_workload(store, family=request.family, name=request.name,
                                  config=request.config.to_json(), batch_size=request.batch_size,
                                  world_size=request.world_size, sharder=request.sharder, plan=request.plan,
                                  task_id=request.task_id)
    optimizer = "exact_sgd" if request.family == "dlrm" else None
    summary: dict[str, Any] = {"workload_id": workload_id, **write_ground_truth(
        store, run_id=run_id, workload_id=workload_id, platform=platform, iterations=request.iters,
        warmup=request.warmup, threads=results[0]["threads"], allocator=allocator, results=results,
        optimizer=optimizer, repeats=launches[1:])}
    summary["wall_s"] = {f"rank{r['rank']}": {k: round(v, 3) for k, v in r["wall_s"].items()} for r in results}
    summary["info"] = results[0]["info"]
    summary.update(rank0_probes(launches))
    if request.trace_iters:
        from collectors.traces.ingest import RankTraces, ingest_trace_set

        summary["trace_bytes"] = {f"rank{r['rank']}": {"kineto": os.path.getsize(r["kineto"]),
                                                       "et": os.path.getsize(r["et"])} for r in results}
        ranks = [RankTraces(r["rank"], Path(r["kineto"]), Path(r["et"]), profiled_with="kineto") for r in results]
        started = time.perf_counter()
        summary["trace_set_id"] = ingest_trace_set(store, run_id, platform, ranks, label=request.name,
                                                   workload_id=workload_id, source="captured")
        summary["ingest_s"] = round(time.perf_counter() - started, 3)
    return summary


def store_results(store: Store, run_id: str, platform: str, request: WorkloadRequest,
                  launches: list[list[dict[str, Any]]], allocator: dict[str, Any]) -> dict[str, Any]:
    """The rows of a run whose ranks ran elsewhere (a torchrun job, :mod:`collectors.workloads.torchrun`): the
    workload row, every rank's ground truth and the trace set; returns the run summary."""
    return _store(store, run_id, platform, request, launches, allocator)
