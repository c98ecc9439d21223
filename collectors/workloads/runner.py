"""Workload ranks: the shared multi-rank launcher (:mod:`collectors.launch`) with a fork server that has torch and
the modules of the workload's family imported once (a rank starts in ~0.1 s instead of several seconds).

``launch(target, world_size, payload, family=..., ...)`` takes the options of :func:`collectors.launch.launch`
(start_env, rank_env, log_dir, timeout_s, progress); ranks call :func:`collectors.launch.tick` to advance the progress
bar. The fork server starts once per parent process, with the preload of the first launch's family: a later launch of
the other family imports its own modules in each rank.
"""
from __future__ import annotations

from typing import Any, Callable

from collectors import launch as launcher

# Imported once by the fork server instead of in every rank (torch._dynamo: the first optimizer construction imports
# it, ~2.5 s). By family: FBGEMM for DLRM; transformers' modeling code (~3.5 s on a 2-core host) for transformers.
COMMON = ("torch", "torch._dynamo", "collectors.workloads.worker")
BY_FAMILY = {"dlrm": ("fbgemm_gpu", "collectors.workloads.dlrm", "collectors.workloads.dlrm_data"),
             "transformer": ("transformers.modeling_utils", "transformers.models.auto.modeling_auto",
                             "collectors.workloads.transformer")}


def preload(family: str | None) -> tuple[str, ...]:
    """The modules the fork server imports for ``family`` (None: every family's)."""
    families = [family] if family is not None else list(BY_FAMILY)
    return COMMON + tuple(m for f in families for m in BY_FAMILY[f])


def launch(target: Callable[[int, int, Any], Any], world_size: int, payload: Any, *, family: str | None = None,
           **options: Any) -> list[Any]:
    """Run ``target(rank, world_size, payload)`` on ``world_size`` forked ranks; their results in rank order, or
    :class:`collectors.launch.RankFailed`."""
    return launcher.launch(target, world_size, payload, start_method="forkserver", preload=preload(family),
                           **options)


def prestart(family: str | None, start_env: dict[str, str] | None = None) -> None:
    """Start the ranks' fork server with ``family``'s preload now (see :func:`collectors.launch.prestart`)."""
    launcher.prestart(preload(family), start_env)
