"""Per-table statistics of a task's embedding inputs (the embedding model's inputs), without running the workload.

They come from the workload's own input generator (:class:`collectors.workloads.dlrm_data.DlrmBatches`), whose
streams depend on (seed, batch, table) only, so they are what any plan of the task looks up: B (global batch),
E, D, the measured mean pooling L and the 17 reuse factors, averaged over the given batches.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from shard.plans import ShardTask


def table_stats(task: ShardTask, seed: int, batches: Sequence[int]) -> list[dict[str, Any]]:
    """One statistics row per table (index = table index): batch_size, num_rows, dim, pooling_mean, reuse_factors."""
    import torch

    from collectors.workloads.dlrm_data import DlrmBatches
    from collectors.workloads.sharders import rank_layout

    if not batches:
        raise ValueError("table statistics need at least one batch")
    layout = rank_layout([0] * task.num_tables, task.dims, 1, task.batch_size)  # one rank holds every table
    data = DlrmBatches(task.config, layout, 0, seed, torch.device("cpu"))
    rows: dict[int, list[dict[str, Any]]] = {}
    for k in batches:
        for row in data.make(int(k))[1]:
            rows.setdefault(int(row["table_index"]), []).append(row)
    out = []
    for t in range(task.num_tables):
        group = rows[t]
        out.append({"table_index": t, "batch_size": task.batch_size, "num_rows": int(group[0]["num_rows"]),
                    "dim": int(group[0]["dim"]), "pooling_mean": float(np.mean([g["pooling_mean"] for g in group])),
                    "reuse_factors": np.mean([g["reuse_factors"] for g in group], axis=0).tolist(),
                    "index_source": group[0]["index_source"]})
    return out
