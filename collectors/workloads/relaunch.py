"""``pmdb collect relaunch``: more launches of a stored workload run, added to that run's ground truth.

A run's launches need not follow each other. On a host whose pace moves over minutes, ground truth taken in one
15 s burst and prices taken over the next minute sample different phases; relaunching each run between the rounds
of ``pmdb collect ops --from-traces`` samples both over the same minutes.

Each relaunch is its own 'relaunch' collection run (``args.adds_to`` names the workload run): its ranks' iteration
times are its e2e_measurements rows (launch k's iteration i as k * iterations + i, as a run with ``--repeats``
stores them) and rank 0's memory probes are in its summary (the LLC and memory pace found at the truth,
:func:`simulator.memory_phase.run_summaries`, count them). When it completes, in the same transaction, the workload
run's ``measured_us`` becomes the median of the launch medians of the run and every completed relaunch of it, and
``spread`` the (p90 - p10) / median of all their iterations (the rules of
:func:`collectors.workloads.store_rows.write_ground_truth`). A relaunch that fails or is interrupted changes nothing;
the launches' own rows keep the earlier ground truth recomputable.
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from collectors.workloads.allocator import allocator_env
from collectors.workloads.collect import (LAUNCH_TOLERANCE, WorkloadRequest, job_of, launch_ranks, launches_agree,
                                          rank0_probes, run_folder)
from collectors.workloads.ground_truth import summarise
from collectors.workloads.store_rows import config_hash
from pmdb.errors import PmdbError
from pmdb.store import Store

KIND = "relaunch"
_PATHS = ("config", "sharding", "exchange_dir")   # options stored as text that the request reads as paths


def stored_request(store: Store, run_id: str) -> tuple[WorkloadRequest, str]:
    """The request a completed, locally launched workload run was collected with (rebuilt from its stored options;
    without traces) and its platform; a PmdbError when the run is not one or its options no longer describe it."""
    from collectors.workloads.requests import workload_request

    row = store.conn.execute(
        "SELECT c.kind, c.status, c.platform, CAST(c.args AS VARCHAR), k.config_hash, w.source "
        "FROM collection_runs c LEFT JOIN workload_runs w USING (run_id) LEFT JOIN workloads k USING (workload_id) "
        "WHERE c.run_id = ?", [run_id]).fetchone()
    if row is None:
        raise PmdbError(f"no run {run_id!r} (`pmdb runs --kind workload` lists the workload runs)")
    kind, status, platform, text, digest, source = row
    if kind != "workload" or digest is None or source != "measured":
        raise PmdbError(f"run {run_id[:12]} is not a measured workload run (it is a {kind!r} run)")
    if status != "completed":
        raise PmdbError(f"run {run_id[:12]} is {status}, not completed: only a completed run's ground truth grows")
    args = json.loads(text or "{}")
    if args.get("launcher") == "torchrun":
        raise PmdbError(f"run {run_id[:12]} ran as a torchrun job: relaunch it with the same torchrun command")
    opts = {k: v for k, v in args.items() if k not in ("family", "platform")}
    opts["timeout_s"] = opts.pop("timeout", None)
    for key in _PATHS:
        if opts.get(key) is not None:
            opts[key] = Path(opts[key])
    request = workload_request(store, args.get("family"), opts)
    sharding = None if request.plan is None else {"sharder": request.sharder, "plan": list(request.plan)}
    if config_hash(request.config.to_json(), request.batch_size, request.world_size, sharding) != digest:
        raise PmdbError(f"the options of run {run_id[:12]} no longer describe its workload (a --config or "
                        f"--sharding file changed?): nothing relaunched")
    return replace(request, trace_iters=0, repeats=1, min_repeats=None), platform


def relaunch_ids(store: Store, run_id: str) -> list[str]:
    """The completed relaunches of ``run_id``, oldest first."""
    return [r for (r,) in store.conn.execute(
        "SELECT run_id FROM collection_runs WHERE kind = ? AND status = 'completed' AND args->>'$.adds_to' = ? "
        "ORDER BY started_at", [KIND, run_id]).fetchall()]


def launch_medians(store: Store, run_id: str) -> tuple[list[float], np.ndarray]:
    """Every launch's median step (µs) of the workload run and its completed relaunches, in launch order, and all
    their per-iteration steps (max over ranks, µs)."""
    iterations = store.scalar("SELECT iterations FROM workload_runs WHERE run_id = ?", [run_id])
    if not iterations:   # no such run, or one whose iterations were not counted (imported)
        return [], np.zeros(0)
    iterations = int(iterations)
    ids = [run_id, *relaunch_ids(store, run_id)]
    frame = store.query(
        "SELECT run_id, iteration, max(time_us) AS worst FROM e2e_measurements "
        "WHERE list_contains(?, run_id) GROUP BY run_id, iteration", [ids])
    frame["launch"] = frame["iteration"] // iterations
    frame["order"] = frame["run_id"].map({r: k for k, r in enumerate(ids)})
    groups = frame.sort_values(["order", "launch", "iteration"]).groupby(["order", "launch"], sort=True)["worst"]
    return [float(np.median(g)) for _, g in groups], frame["worst"].to_numpy(dtype=float)


def ground_truth_of(medians: list[float], steps: np.ndarray) -> tuple[float, float]:
    """(measured_us, spread) of launches with these medians and per-iteration steps: the median of the medians (the
    one launch's median when alone) and (p90 - p10) / median of all steps (µs, share)."""
    return float(np.median(medians)), summarise([steps])["spread"]


def relaunch(store: Store, run_id: str, launches: int = 1, min_launches: int | None = None,
             tolerance: float | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """Launch the run's workload ``launches`` more times and add them to its ground truth; returns the summary
    (``launch_medians_us``, ``measured_us_before`` and ``measured_us``). With ``min_launches``: nothing runs when the
    run already has that many launches whose medians agree within ``tolerance`` (``settled`` in the summary)."""
    if launches < 1:
        raise PmdbError("--launches must be >= 1")
    request, platform = stored_request(store, run_id)
    if timeout_s is not None:
        request = replace(request, timeout_s=timeout_s)
    medians, _ = launch_medians(store, run_id)
    before = float(store.scalar("SELECT measured_us FROM workload_runs WHERE run_id = ?", [run_id]))
    tolerance = LAUNCH_TOLERANCE if tolerance is None else tolerance
    if min_launches is not None and len(medians) >= min_launches and launches_agree(medians, tolerance):
        return {"adds_to": run_id, "name": request.name, "settled": True, "launch_medians_us": _rounded(medians),
                "measured_us_before": before, "measured_us": before}
    args = {"adds_to": run_id, "launches": launches, "min_launches": min_launches}
    with store.run(KIND, platform, args) as run, run_folder(store, run.run_id) as work:
        env = allocator_env()
        job = job_of(request, None)
        results = [launch_ranks(request, job, env, work, f"{request.name} +{k + 1}") for k in range(launches)]
        store.insert("e2e_measurements", [{"run_id": run.run_id, "iteration": k * request.iters + i,
                                           "rank": r["rank"], "time_us": t}
                                          for k, ranks in enumerate(results) for r in ranks
                                          for i, t in enumerate(r["times_us"])])
        # rank 0's memory and compute probes of every launch: the LLC and paces the run's truth found include them
        run.summary = {"adds_to": run_id, "name": request.name, "settled": False, "measured_us_before": before,
                       **rank0_probes(results)}

        def update() -> None:   # as the relaunch completes: its launches count from then on
            medians, steps = launch_medians(store, run_id)
            measured, spread = ground_truth_of(medians, steps)
            store.conn.execute("UPDATE workload_runs SET measured_us = ?, spread = ? WHERE run_id = ?",
                               [measured, spread, run_id])
            run.summary.update(launch_medians_us=_rounded(medians), measured_us=measured)   # stored with the run

        run.on_complete.append(update)
    return run.summary


def _rounded(medians: list[float]) -> list[float]:
    return [round(m, 1) for m in medians]
