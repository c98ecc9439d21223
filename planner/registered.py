"""The registered models of a platform as a planner calibration, through the fitters' registry loader
(:mod:`fitters.load`): the GEMM kernel model and the collective models an alias (``champion``) points at.

GEMM: the ``fully_connected`` forward model (columns B, M, N, K; the torch implementation), on the first cache
state in :data:`CACHE_PREFERENCE` it was fitted on: ``device`` timings on GPUs; on CPUs ``cold`` before ``warm``,
because cold timings are the ones close to in-context op times (warm ones under-predict them ~1.45x).
Collectives: one model per (collective, world size), predicting µs from ``max_rank_bytes``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pmdb.store import Store
from planner.calibration import FittedModels

if TYPE_CHECKING:
    from fitters.load import ModelRef

GEMM_OP = "fully_connected"
CACHE_PREFERENCE = ("device", "cold", "warm")
CHAMPION = "champion"   # the fitters' alias of the best version (fitters.registry.CHAMPION)


def gemm_ref(refs: list["ModelRef"], op: str = GEMM_OP) -> "ModelRef | None":
    """The GEMM model among ``refs``: ``op`` forward, torch implementation, by :data:`CACHE_PREFERENCE`
    (then by name, so the choice is deterministic); None when there is none."""
    rank = {state: i for i, state in enumerate(CACHE_PREFERENCE)}
    found = [r for r in refs if not r.is_collective and r.op == op and r.pass_ == "fwd"
             and r.implementation in (None, "torch")]
    found.sort(key=lambda r: (rank.get(r.cache_state or "", len(rank)), r.name))
    return found[0] if found else None


def collective_refs(refs: list["ModelRef"]) -> dict[tuple[str, int], "ModelRef"]:
    """(collective, world size) -> its model among ``refs``."""
    return {(r.op, int(r.world_size)): r for r in sorted(refs, key=lambda r: r.name)
            if r.world_size is not None}


def registered_models(store: Store, platform: str, alias: str = CHAMPION) -> FittedModels | None:
    """The platform's models at ``alias`` as a calibration whose label names every version used
    ('registered champion models of P: pmdb.P.fully_connected.fwd.cold v3, ...'); None when it has none."""
    from fitters.load import load_model, select_models

    refs = select_models(store, platform, alias)
    gemm = gemm_ref(refs)
    collectives = collective_refs(refs)
    if gemm is None and not collectives:
        return None
    used = ([gemm] if gemm else []) + list(collectives.values())
    label = (f"registered {alias} models of {platform}: "
             + ", ".join(f"{r.name} v{r.version}" for r in used))

    def load(ref: "ModelRef") -> object:
        return load_model(store.workspace, ref.name, ref.version)

    return FittedModels(load(gemm) if gemm else None, {key: load(ref) for key, ref in collectives.items()},
                        label=label)
