"""Finding a recorded trace set to derive a study's plans from: a DLRM trace set (captured or imported, completed,
Kineto and execution trace on every rank) whose workload has the task's structure (:func:`same_structure`) and
whose plan has the study's :func:`shard.derive.structure_key`. This platform's traces first, then the newest."""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pmdb.store import Store
from shard.derive import structure_key
from shard.plans import ShardTask

_CANDIDATES = """
SELECT t.trace_set_id, t.platform, w.config, w.sharding
FROM v_trace_sets t JOIN workloads w USING (workload_id)
WHERE w.family = 'dlrm' AND t.source IN ('captured', 'imported') AND t.world_size = ? AND w.batch_size = ?
  AND w.sharding IS NOT NULL
  AND (SELECT count(DISTINCT (v.rank, v.kind)) FROM v_traces v WHERE v.trace_set_id = t.trace_set_id) = 2 * t.world_size
ORDER BY (t.platform = ?) DESC, t.created_at DESC, t.trace_set_id DESC
"""


@dataclass(frozen=True)
class Source:
    """A trace set to derive from and the placement it was recorded with."""

    trace_set_id: int
    platform: str
    ranks: tuple[int, ...]


def same_structure(config: dict[str, Any], task: ShardTask) -> bool:
    """Same MLP widths, table count, table dimensions and lookup implementation as the task's DLRM."""
    tables = config.get("tables") or []
    return (list(config.get("bottom_mlp", [])) == list(task.config.bottom_mlp)
            and list(config.get("top_mlp", [])) == list(task.config.top_mlp)
            and [int(t.get("dim", 0)) for t in tables] == task.dims
            and config.get("embedding", "fbgemm_tbe") == task.config.embedding)


def find_source(store: Store, task: ShardTask, key: tuple, platform: str) -> Source | None:
    """The best trace set to derive plans of structure ``key`` from, or None."""
    frame = store.query(_CANDIDATES, [task.world_size, task.batch_size, platform])
    for row in frame.itertuples(index=False):
        config, ranks = json.loads(row.config), json.loads(row.sharding)
        if (same_structure(config, task) and len(ranks) == task.num_tables
                and structure_key(task, ranks) == key):
            return Source(int(row.trace_set_id), str(row.platform), tuple(int(r) for r in ranks))
    return None
