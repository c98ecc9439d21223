"""The trainer of a workload on one rank: what `collect workload` times and traces, and what the benchmarks rebuild
from a stored run's config to time it again (``benchmarks/host_op_diagnosis.py``, ``benchmarks/host_phase.py``)."""
from __future__ import annotations

from typing import Any, Sequence


def make_trainer(family: str, config: Any, device: Any, *, rank: int = 0, world_size: int = 1, seed: int = 0,
                 plan: Sequence[int] | None = None, batch_size: int | None = None) -> Any:
    """A ``DlrmTrainer`` (``family`` "dlrm": ``config`` a DlrmConfig, its tables placed by ``plan``, every table on
    rank 0 without one; ``batch_size`` the global batch, the config's without one) or a ``TransformerTrainer``
    (``config`` a TransformerConfig)."""
    if family == "dlrm":
        from collectors.workloads.dlrm import DlrmTrainer
        from collectors.workloads.sharders import rank_layout

        placed = list(plan) if plan is not None else [0] * len(config.tables)
        layout = rank_layout(placed, [t.dim for t in config.tables], world_size, batch_size or config.batch_size)
        return DlrmTrainer(config, layout, rank, seed, device)
    from collectors.workloads.transformer import TransformerTrainer

    return TransformerTrainer(config, rank, world_size, seed, device)


def stored_config(family: str, stored: dict[str, Any], batch_size: int) -> Any:
    """The config object of a workload run from the config its summary stores (a transformer's at ``batch_size``;
    keys the config does not know, such as the model's own settings, are left out)."""
    if family == "dlrm":
        from collectors.workloads.dlrm_presets import from_dict

        return from_dict(stored)
    from collectors.workloads.transformer_shape import TransformerConfig

    known = {k: v for k, v in stored.items() if k in TransformerConfig.__dataclass_fields__}
    return TransformerConfig(**{**known, "batch_size": batch_size})
