"""Running a plan with the workloads code: the short single-iteration capture a derivation needs when no trace of
the task's structure exists, and the ground truth of ``--validate`` (every plan, in interleaved rounds).

Ground truth on a shared CPU drifts over minutes, so plans are measured round-robin (the order rotates each round)
and a plan's time is the median over all its timed iterations of the slowest rank; the spread over rounds is kept.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from collectors.workloads.collect import WorkloadRequest, collect_workload
from collectors.workloads.requests import default_threads, device_for
from pmdb.store import Store
from shard.plans import Plan, ShardTask

CAPTURE_WARMUP = 2  # untimed iterations before the captured one


@dataclass(frozen=True)
class RunSettings:
    """How plans are run: iterations, threads per rank, rounds of the ground truth, a per-launch timeout (s)."""

    iters: int = 10
    warmup: int = 3
    rounds: int = 2
    threads: int | None = None
    seed: int = 0
    timeout_s: float | None = None


def workload_request(task: ShardTask, plan: Plan, settings: RunSettings, *, iters: int, warmup: int,
                     trace_iters: int) -> WorkloadRequest:
    """The workloads runner's request for one plan of the task."""
    return WorkloadRequest("dlrm", task.config, task.batch_size, task.world_size, iters=iters, warmup=warmup,
                           threads=settings.threads or default_threads(), seed=settings.seed,
                           sharder=plan.sharder, plan=plan.ranks, task_id=task.task_id, trace_iters=trace_iters,
                           timeout_s=settings.timeout_s, device=device_for(task.world_size))


def capture(store: Store, platform: str, task: ShardTask, plan: Plan, settings: RunSettings,
            args: dict[str, Any]) -> tuple[int, float]:
    """Record one iteration of ``plan`` (Kineto and execution trace per rank); (trace set id, wall seconds)."""
    started = time.perf_counter()
    request = workload_request(task, plan, settings, iters=1, warmup=CAPTURE_WARMUP, trace_iters=1)
    summary = collect_workload(store, platform, request, {**args, "purpose": "shard-capture",
                                                          "sharder": plan.sharder})
    return int(summary["trace_set_id"]), time.perf_counter() - started


@dataclass
class Measured:
    """Ground truth of one plan: its runs (one per round), the pooled median (µs) and the spread over rounds."""

    runs: list[str] = field(default_factory=list)
    per_round_us: list[float] = field(default_factory=list)
    measured_us: float = float("nan")
    spread: float = float("nan")


def _pooled_median(store: Store, run_ids: Sequence[str]) -> float:
    """Median over the runs' timed iterations of the slowest rank's time (µs)."""
    frame = store.query("SELECT run_id, iteration, max(time_us) AS worst FROM v_e2e_measurements "
                        "WHERE run_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY run_id, iteration", [list(run_ids)])
    return float(np.median(frame["worst"])) if len(frame) else float("nan")


def _latest_run(store: Store, workload_id: int) -> str:
    """The run id of the workload run just stored (collect_workload's summary does not carry it)."""
    return str(store.scalar("SELECT w.run_id FROM workload_runs w JOIN collection_runs c USING (run_id) "
                            "WHERE w.workload_id = ? ORDER BY c.started_at DESC LIMIT 1", [workload_id]))


def ground_truth(store: Store, platform: str, task: ShardTask, plans: Sequence[Plan], settings: RunSettings,
                 args: dict[str, Any], progress: Callable[[str], None] | None = None) -> tuple[dict[str, Measured], float]:
    """Run every plan ``settings.rounds`` times (rotating the order); per sharder its :class:`Measured`, and the
    wall seconds it all took."""
    started = time.perf_counter()
    out = {p.sharder: Measured() for p in plans}
    for round_ in range(settings.rounds):
        order = list(plans[round_ % len(plans):]) + list(plans[:round_ % len(plans)])
        for plan in order:
            if progress:
                progress(f"ground truth round {round_ + 1}/{settings.rounds}: {plan.sharder}")
            request = workload_request(task, plan, settings, iters=settings.iters, warmup=settings.warmup,
                                       trace_iters=0)
            summary = collect_workload(store, platform, request, {**args, "purpose": "shard-validate",
                                                                  "sharder": plan.sharder, "round": round_})
            out[plan.sharder].runs.append(_latest_run(store, int(summary["workload_id"])))
            out[plan.sharder].per_round_us.append(float(summary["measured_us"]))
    for measured in out.values():
        measured.measured_us = _pooled_median(store, measured.runs)
        rounds = np.asarray(measured.per_round_us)
        measured.spread = float((rounds.max() - rounds.min()) / np.median(rounds)) if len(rounds) else float("nan")
    return out, time.perf_counter() - started
