"""What a workload run writes: the workload shape (found by hash or inserted), the ground truth (workload_runs,
e2e_measurements), the per-iteration embedding statistics and the optimizer state's zero shares. Called only after
every rank succeeded."""
from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

import numpy as np

from collectors.workloads.ground_truth import launch_median_us, summarise
from pmdb.store import Store


def config_hash(config: dict[str, Any], batch_size: int, world_size: int, sharding: dict[str, Any] | None) -> str:
    """sha256 of the canonical config, batch size, world size and sharding (sharder name and plan)."""
    key = {"config": config, "batch_size": batch_size, "world_size": world_size, "sharding": sharding}
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def ensure_workload(store: Store, *, family: str, name: str, config: dict[str, Any], batch_size: int,
                    world_size: int, sharder: str | None = None, plan: Sequence[int] | None = None,
                    task_id: int | None = None) -> int:
    """The workload_id of this shape, inserting the row the first time it is seen."""
    sharding = None if plan is None else {"sharder": sharder, "plan": list(plan)}
    digest = config_hash(config, batch_size, world_size, sharding)
    found = store.scalar("SELECT workload_id FROM workloads WHERE config_hash = ?", [digest])
    if found is not None:
        return int(found)
    return int(store.insert_one("workloads", {
        "family": family, "name": name, "config": config, "config_hash": digest, "batch_size": batch_size,
        "world_size": world_size, "sharder": sharder, "sharding": None if plan is None else list(plan),
        "task_id": task_id}, returning="workload_id"))


def write_ground_truth(store: Store, *, run_id: str, workload_id: int, platform: str, iterations: int, warmup: int,
                       threads: int, allocator: dict[str, Any], results: Sequence[dict[str, Any]],
                       optimizer: str | None = None,
                       repeats: Sequence[Sequence[dict[str, Any]]] = ()) -> dict[str, Any]:
    """workload_runs + e2e_measurements (+ embedding_batch_stats for DLRM, optimizer_state_stats when the optimizer
    keeps state) of one run; returns the summary.

    ``results``: the per-rank results of the (first) launch; ``repeats``: those of further launches of the same
    workload (ground truth only). With repeats, ``measured_us`` is the median over launches of each launch's
    median, ``spread`` is taken over the iterations of every launch, and launch k's iterations are stored as
    k * ``iterations`` + i."""
    launches = [results, *repeats]
    pooled = [[t for launch in launches for t in launch[rank]["times_us"]] for rank in range(len(results))]
    summary: dict[str, Any] = summarise(pooled)
    if repeats:
        medians = [launch_median_us(launch) for launch in launches]
        summary["measured_us"] = float(np.median(medians))
        summary["launch_medians_us"] = [round(m, 1) for m in medians]
        summary["launch_spread"] = (max(medians) - min(medians)) / summary["measured_us"]
    store.insert_one("workload_runs", {
        "run_id": run_id, "workload_id": workload_id, "platform": platform, "iterations": iterations,
        "warmup": warmup, "threads": threads, "allocator": allocator, "measured_us": summary["measured_us"],
        "spread": summary["spread"]})
    store.insert("e2e_measurements", [{"run_id": run_id, "iteration": k * iterations + i, "rank": r["rank"],
                                       "time_us": t}
                                      for k, launch in enumerate(launches) for r in launch
                                      for i, t in enumerate(r["times_us"])])
    stats = [dict(row, run_id=run_id, workload_id=workload_id, optimizer=optimizer)
             for r in results for row in r.get("stats", [])]
    store.insert("embedding_batch_stats", stats)
    store.insert("optimizer_state_stats", [dict(row, run_id=run_id, workload_id=workload_id)
                                           for r in results for row in r.get("state_stats", [])])
    return summary
