"""Workload ranks: the shared multi-rank launcher (:mod:`collectors.launch`) with a fork server that has torch,
FBGEMM and the workload modules imported once (a rank starts in ~0.1 s instead of several seconds).

``launch(target, world_size, payload, ...)`` takes the options of :func:`collectors.launch.launch` (start_env,
rank_env, log_dir, timeout_s, progress); ranks call :func:`collectors.launch.tick` to advance the progress bar.
"""
from __future__ import annotations

from typing import Any, Callable

from collectors import launch as launcher

# Imported once by the fork server instead of in every rank (torch._dynamo: the first optimizer construction imports
# it, ~2.5 s; transformers' modeling code ~5 s).
PRELOAD = ("torch", "torch._dynamo", "fbgemm_gpu", "transformers.modeling_utils",
           "transformers.models.auto.modeling_auto", "collectors.workloads.worker", "collectors.workloads.dlrm",
           "collectors.workloads.dlrm_data", "collectors.workloads.transformer")


def launch(target: Callable[[int, int, Any], Any], world_size: int, payload: Any, **options: Any) -> list[Any]:
    """Run ``target(rank, world_size, payload)`` on ``world_size`` forked ranks; their results in rank order, or
    :class:`collectors.launch.RankFailed`."""
    return launcher.launch(target, world_size, payload, start_method="forkserver", preload=PRELOAD, **options)
