"""Workload ranks: the shared multi-rank launcher (:mod:`collectors.launch`) with a fork server that has torch, FBGEMM
and the workload modules imported once (a rank starts in ~0.1 s instead of several seconds).

``launch(target, world_size, payload, ...)`` takes the options of :func:`collectors.launch.launch` (start_env,
rank_env, log_dir, timeout_s, progress); ranks call :func:`collectors.launch.tick` to advance the progress bar.
:func:`prestart` starts the fork server ahead of the first launch. The server lives as long as the process that
started it and serves every later launch of that process (`pmdb quickstart` runs its DLRM and transformer steps in
one process): so it imports the modules of every family, not only those of the first run's.
"""
from __future__ import annotations

from typing import Any, Callable

from collectors import launch as launcher

# Imported once by the fork server instead of in every rank (torch._dynamo: the first optimizer construction imports
# it, ~2.5 s; transformers' modeling code ~3.5 s on a 2-core host, which a rank of a server without it pays at
# every launch).
PRELOAD = ("torch", "torch._dynamo", "fbgemm_gpu", "transformers.modeling_utils",
           "transformers.models.auto.modeling_auto", "collectors.workloads.worker", "collectors.workloads.dlrm",
           "collectors.workloads.dlrm_data", "collectors.workloads.transformer")


def launch(target: Callable[[int, int, Any], Any], world_size: int, payload: Any, **options: Any) -> list[Any]:
    """Run ``target(rank, world_size, payload)`` on ``world_size`` forked ranks; their results in rank order, or
    :class:`collectors.launch.RankFailed`."""
    return launcher.launch(target, world_size, payload, start_method="forkserver", preload=PRELOAD, **options)


def prestart(start_env: dict[str, str] | None = None) -> None:
    """Start the ranks' fork server now (see :func:`collectors.launch.prestart`): its imports overlap the caller's
    work until the first launch."""
    launcher.prestart(PRELOAD, start_env)
