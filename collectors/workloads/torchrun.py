"""``pmdb collect workload`` inside a ``torchrun`` job: every rank of the job measures and records, rank 0 stores.

Started by ``torchrun --nnodes N --nproc-per-node K ... -m pmdb --home WS collect workload ... --exchange-dir DIR``
on every node. Rank 0 (the writing rank, the only one that opens the workspace) resolves the request, opens the
'workload' collection run and hands the job to the other ranks over the job's process group (gloo on CPU, NCCL on
CUDA); each rank runs the same program as a rank of a local launch (:func:`collectors.workloads.worker.run_rank`:
ground truth, then the Kineto and execution-trace passes), writes its trace files into ``DIR/pmdb-<run id>/``
(a directory every node can write and rank 0 can read: a shared file system) and gathers its timings to rank 0.
Rank 0 stores the ground truth of every rank and the traces as one trace set, then removes the run's folder.

Failures: a rank that raises, dies or is killed makes the others fail at their next collective (the process group
closes); rank 0 marks the run failed (interrupted on SIGTERM/Ctrl-C) and stores nothing of it: the workload row,
ground truth and traces are written only after every rank handed over its results. The exchange folder is kept
and named in the error. Ranks wait at most the process group's timeout (``--timeout``, default 300 s) for a peer.
"""
from __future__ import annotations

import shutil
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from collectors.comms.config import DEFAULT_TIMEOUT_S, TorchrunEnv
from collectors.launch import one_line
from collectors.workloads.allocator import allocator_record
from collectors.workloads.collect import WorkloadRequest, store_results
from collectors.workloads.worker import WorkloadJob, run_rank
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store

FOLDER_PREFIX = "pmdb-"
REFUSE_TIMEOUT_S = 60.0   # how long rank 0 waits for the other ranks to tell them it did not start


def _init(env: TorchrunEnv, device: str, timeout_s: float | None) -> None:
    """Join the torchrun job's process group (MASTER_ADDR/MASTER_PORT from the environment), once."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return
    cuda = device == "cuda"
    if cuda:
        torch.cuda.set_device(env.local_rank)
    dist.init_process_group("nccl" if cuda else "gloo", rank=env.rank, world_size=env.world_size,
                            timeout=timedelta(seconds=timeout_s or DEFAULT_TIMEOUT_S))


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def refuse(env: TorchrunEnv, message: str, timeout_s: float = REFUSE_TIMEOUT_S) -> None:
    """Rank 0 could not start the run (a bad option, an unknown platform): tell the other ranks, which are waiting
    for their job, so that they stop with the same line instead of waiting out the timeout."""
    import torch.distributed as dist

    try:
        _init(env, _device(), timeout_s)
        dist.broadcast_object_list([("error", message)], src=0)
        dist.destroy_process_group()   # nothing ran: no collective is in flight
    except RuntimeError:
        pass  # the others are gone already: nothing to tell


def follow(env: TorchrunEnv, timeout_s: float | None = None) -> dict[str, Any]:
    """A rank other than 0: receive the job from rank 0, run it, hand the results to rank 0."""
    import torch.distributed as dist

    if env.rank == 0:
        raise PmdbError("rank 0 stores the run: call collect_joined there")
    try:
        _init(env, _device(), timeout_s)
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0)
        status, job = box[0]
        if status == "error":
            raise PmdbError(f"rank 0 did not start the run: {job}")
        out = run_rank(env.rank, env.world_size, job)
        dist.gather_object(out, None, dst=0)
    except RuntimeError as exc:   # the process group broke: a peer failed or died
        raise PmdbError(f"rank {env.rank}: the torchrun job failed ({one_line(exc)}); rank 0 stores nothing "
                        f"of it") from None
    return out


def check_request(request: WorkloadRequest, env: TorchrunEnv, exchange_dir: Path | None) -> None:
    """Refuse what a torchrun job cannot do, before the run starts."""
    if request.repeats > 1:
        raise PmdbError("--repeats launches fresh ranks, which a torchrun job cannot: run the job again instead")
    if request.world_size != env.world_size:
        raise PmdbError(f"--world-size {request.world_size} contradicts the launcher's WORLD_SIZE="
                        f"{env.world_size}")
    if request.trace_iters and exchange_dir is None:
        raise PmdbError("under torchrun the ranks hand their traces to rank 0 through a directory every node can "
                        "write: give --exchange-dir DIR (or --no-trace)")
    if exchange_dir is not None and not exchange_dir.is_dir():
        raise PmdbError(f"--exchange-dir {exchange_dir} is not a directory")


def collect_joined(store: Store, platform: str, request: WorkloadRequest, args: dict[str, Any], env: TorchrunEnv,
                   exchange_dir: Path | None) -> dict[str, Any]:
    """Rank 0: run ``request`` on every rank of the torchrun job under one 'workload' collection run and store it
    (ground truth of every rank, one trace set); returns the run summary."""
    import torch.distributed as dist

    check_request(request, env, exchange_dir)
    if platforms.load(store, platform).is_imported:
        raise PmdbError(f"platform {platform!r} holds imported data; measure under this machine's platform")
    args = {**args, "launcher": "torchrun", "world_size": env.world_size,
            "exchange_dir": str(exchange_dir) if exchange_dir else None}
    with store.run("workload", platform, args) as run:
        folder = (exchange_dir / f"{FOLDER_PREFIX}{run.run_id}") if request.trace_iters else None
        if folder is not None:
            folder.mkdir(parents=True)
        job = WorkloadJob(request.family, request.config, request.batch_size, request.world_size, request.seed,
                          request.iters, request.warmup, request.threads, request.plan, request.trace_iters,
                          str(folder) if folder else None, request.device)
        try:
            _init(env, request.device, request.timeout_s)
            dist.broadcast_object_list([("ok", job)], src=0)
            results: list[Any] = [None] * env.world_size
            out = run_rank(0, env.world_size, job)
            dist.gather_object(out, results, dst=0)
        except RuntimeError as exc:   # the process group broke: a peer failed or died
            kept = f"; rank files kept in {folder}" if folder else ""
            raise PmdbError(f"the torchrun job failed ({one_line(exc)}): nothing of run {run.run_id} is "
                            f"stored{kept}") from None
        _check_files(results, folder)
        run.summary = store_results(store, run.run_id, platform, replace(request, repeats=1), [results],
                                    allocator_record(results[0]["allocator_env"]))
        run.summary["launcher"] = "torchrun"
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
    return run.summary


def _check_files(results: list[dict[str, Any]], folder: Path | None) -> None:
    """Every rank's trace files are readable here (the exchange directory is shared), or the run fails."""
    if folder is None:
        return
    for result in results:
        for kind in ("kineto", "et"):
            path = Path(result[kind])
            if not path.is_file():
                raise PmdbError(f"rank {result['rank']}'s {kind} trace {path} is not readable on rank 0: "
                                f"--exchange-dir must be a directory every node shares")
