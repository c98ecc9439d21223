"""Launching sweep ranks: spawned on this host through the shared launcher (:mod:`collectors.launch`), or joined
from a ``torchrun`` environment.

Backend gloo on CPU, nccl on CUDA (one GPU per rank). A rank's exception reaches the parent with its message
(:class:`RankFailed`); when one rank fails, the others are stopped and nothing of the sweep counts.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist

from collectors import launch as launcher
from collectors.comms.config import DEFAULT_TIMEOUT_S, TorchrunEnv
from collectors.comms.worker import RankContext, Reporter
from collectors.launch import RankFailed

__all__ = ["RankFailed", "backend_for_device", "init_rank", "spawn", "run_inline"]

# fn(ctx, report, payload): ``report`` is set on rank 0 only. Must be a module-level function (it is pickled).
RankFn = Callable[[RankContext, "Reporter | None", Any], None]
OnStep = Callable[[int, np.ndarray], None]


def backend_for_device() -> tuple[str, str]:
    """(process-group backend, device type) of this machine: ('nccl', 'cuda') or ('gloo', 'cpu')."""
    return ("nccl", "cuda") if torch.cuda.is_available() else ("gloo", "cpu")


def init_rank(rank: int, world_size: int, local_rank: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> RankContext:
    """Join the process group (MASTER_ADDR/MASTER_PORT from the environment) and return this rank's context."""
    backend, kind = backend_for_device()
    device = torch.device("cuda", local_rank) if kind == "cuda" else torch.device("cpu")
    if kind == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s),
                            device_id=device if kind == "cuda" else None)
    return RankContext(rank=rank, world_size=world_size, local_rank=local_rank, device=device, backend=backend)


def _report_step(step: int, matrix: np.ndarray) -> None:
    launcher.send((step, matrix))


def _spawned_rank(rank: int, world_size: int, job: tuple[RankFn, int, float, Any]) -> None:
    """The launcher's target: join the group with ``threads`` intra-op threads, run ``fn``, leave the group.

    On an exception the group is left open: the launcher reports the error first and the rank's exit closes the
    connections, so the peers' connection errors are stamped after the root cause."""
    fn, threads, timeout_s, payload = job
    torch.set_num_threads(threads)
    ctx = init_rank(rank, world_size, rank, timeout_s)
    fn(ctx, _report_step if rank == 0 else None, payload)
    dist.destroy_process_group()


def spawn(fn: RankFn, world_size: int, payload: Any, *, threads: int, on_step: OnStep,
          timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Run ``fn`` on ``world_size`` freshly spawned ranks of this host; ``on_step`` receives rank 0's reports here.
    ``timeout_s`` bounds each collective (the process group's timeout), not the sweep.

    Raises :class:`RankFailed` with the root-cause rank's error; no rank survives this call.
    """
    launcher.launch(_spawned_rank, world_size, (fn, threads, timeout_s, payload), start_method="spawn",
                    on_message=lambda rank, message: on_step(*message))


def run_inline(fn: RankFn, env: TorchrunEnv, payload: Any, *, threads: int, on_step: OnStep | None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Play one rank of a torchrun job in this process (``on_step`` is used on rank 0)."""
    torch.set_num_threads(threads)
    ctx = init_rank(env.rank, env.world_size, env.local_rank, timeout_s)
    try:
        fn(ctx, on_step if env.rank == 0 else None, payload)
    finally:
        dist.destroy_process_group()
