"""Sharding plans as a what-if of one recorded DLRM trace set (``pmdb predict --what-if --sharder NAME``): the plan a
Table III sharder makes for the recorded workload's tables, derived per rank by :func:`shard.derive.derive` from the
recorded plan's graphs (at the what-if's batch), as a :data:`simulator.whatif_predict.Reshard` hook.

The table statistics are those the recorded run measured (``embedding_batch_stats``: pooling and reuse factors per
table, averaged over its iterations; batch scaled with the what-if), else the task's input generator's
(:func:`shard.tables.table_stats`, seed 0). Plans whose ranks holding tables differ from the recorded plan's are
refused by :func:`shard.derive.derive`: ``pmdb shard`` captures a trace of that structure instead.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from collectors.workloads import dlrm_presets, sharders
from pmdb.errors import PmdbError
from pmdb.traces.graph import TraceGraph
from shard.derive import derive, table_rows
from shard.plans import Plan, ShardTask
from shard.tables import table_stats
from simulator.embedding_stats import EmbeddingStats
from simulator.whatif_predict import Reshard, SourceSet

STATS_BATCHES = range(3, 6)   # input batches the generator's statistics average over (as a study's defaults)


def task_of(source: SourceSet, batch_size: int) -> ShardTask:
    """The recorded DLRM as a sharding task at ``batch_size`` (its world size)."""
    if source.family != "dlrm" or source.sharding is None:
        raise PmdbError(f"--sharder needs a DLRM trace set recorded with a sharding plan; trace set "
                        f"{source.trace_set_id} is {source.family or 'not a recorded workload'}"
                        f"{'' if source.family != 'dlrm' else ' without a plan (world size 1)'}")
    config = dlrm_presets.from_dict(dict(source.config), f"workload {source.workload_id}")
    if config.embedding != "fbgemm_tbe":
        raise PmdbError(f"--sharder derives plans of the batched FBGEMM lookup; workload {source.workload_id} uses "
                        f"{config.embedding!r}")
    return ShardTask(replace(config, batch_size=batch_size), batch_size, source.world_size)


def reshard_hook(source: SourceSet, sharder: str, seed: int = 0) -> Reshard:
    """The hook deriving ``sharder``'s plan from the recorded plan's graphs."""
    sharders.check_sharder(sharder)
    task_of(source, source.batch_size or 0)   # refuse early: not a sharded DLRM

    def hook(graph: TraceGraph, embedding: EmbeddingStats, batch: int) -> tuple[TraceGraph, EmbeddingStats,
                                                                               dict[str, Any]]:
        task = task_of(source, batch)
        plan = Plan(sharder, tuple(sharders.shard(sharder, task.config.tables, task.world_size, seed)))
        stats = table_rows(embedding, task.num_tables) or table_stats(task, seed, STATS_BATCHES)
        derived = derive(graph, source.sharding, task, plan, stats)
        return derived.graph, derived.embedding, {"sharder": sharder, "plan": list(plan.ranks),
                                                  "changed_ops": derived.changed_ops}
    return hook
