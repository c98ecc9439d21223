"""A plan's per-rank execution traces, derived in memory from a recorded DLRM trace set of the same structure.

Same structure: the same MLPs, table count and dimensions, batch and world size, the same ranks holding tables and
the same column reordering after the exchange (then every rank runs the same op sequence whatever tables it holds).
What a plan changes, and what is rewritten here on a deep copy of the source :class:`~pmdb.traces.graph.TraceGraph`:

* each rank's batched lookup (FBGEMM TBE forward, backward and their bounds check): the arguments that carry the
  tables, found by name in the op schema — ``indices`` (Σ_t B·L_t lookups), ``offsets`` (T·B + 1),
  ``rows_per_table``/``weights_offsets``/``weights_placements`` (T), ``D_offsets``/``hash_size_cumsum`` (T + 1),
  the weights (Σ_t E_t·D_t elements), ``total_D``/``max_D``, and every [B, D_rank] pooled tensor;
* the embedding model's inputs: an :class:`~simulator.embedding_stats.EmbeddingStats` holding, per rank, the
  statistics (E, D, L, reuse factors) of the plan's tables;
* both all_to_all exchanges (forward, then the gradients backward): buffer shapes, split sizes and the message size
  the collective model reads (max over the rank's send and receive buffers, bytes); their recorded CPU time, which
  includes waiting for the source plan's slowest rank, becomes the least over ranks.

Ops whose cost does not depend on the placement (MLPs, interaction, DDP all_reduce) are left as recorded, and so are
the few small copies that split the received buffer (their sizes change with the plan; their time stays the traced one).
Measured iteration times are cleared: they belong to the source plan. The source may itself be derived (a graph
rescaled to another batch by :func:`simulator.whatif.scale_batch`, with the task at that batch): ``pmdb predict
--what-if --sharder`` derives plans that way (:mod:`shard.reshard`); the table statistics may come from the
recorded run (:func:`table_rows`) instead of the task's input generator.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np

from collectors.workloads.dlrm import block_order
from collectors.workloads.sharders import RankLayout, rank_layout
from pmdb.errors import PmdbError
from pmdb.traces import oparg
from shard.plans import Plan, ShardTask
from simulator.embedding_stats import EmbeddingStats
from simulator.whatif import BOUNDS_CHECK, CUMSUM_ARGS, EMBEDDING_MARK, PER_TABLE_ARGS, WEIGHT_ARGS
from pmdb.traces.graph import Op, TraceGraph


@dataclass(frozen=True)
class RankLookup:
    """What one rank's lookup and exchange carry under a plan (sizes in elements, message sizes in bytes)."""

    rank: int
    tables: tuple[int, ...]
    indices: int                 # lookups of one batch: Σ_t round(B · L_t)
    offsets: int                 # T·B + 1
    weight_elements: int         # Σ_t E_t · D_t
    total_dim: int               # Σ_t D_t
    comm_bytes: tuple[float, ...] = ()   # per all_to_all of the iteration (forward, backward)


@dataclass
class DerivedPlan:
    """A plan's simulator input: the rewritten graph, the embedding statistics per rank, what changed."""

    plan: Plan
    graph: TraceGraph
    embedding: EmbeddingStats
    ranks: list[RankLookup]
    changed_ops: int


def structure_key(task: ShardTask, ranks: Sequence[int]) -> tuple[tuple[bool, ...], bool]:
    """(which ranks hold tables, whether the exchanged columns need reordering): plans with the same key run the
    same op sequence on every rank."""
    layout = rank_layout(list(ranks), task.dims, task.world_size, task.batch_size)
    return tuple(bool(t) for t in layout.tables), block_order(layout) is not None


def _rank_lookup(rank: int, layout: RankLayout, stats: Sequence[dict[str, Any]]) -> RankLookup:
    tables = layout.tables[rank]
    rows = [stats[t] for t in tables]
    return RankLookup(rank, tables,
                      indices=int(sum(round(r["batch_size"] * r["pooling_mean"]) for r in rows)),
                      offsets=len(tables) * layout.batch_size + 1,
                      weight_elements=int(sum(r["num_rows"] * r["dim"] for r in rows)),
                      total_dim=int(layout.dims[rank]))


def _is_lookup_tree(op: Op) -> bool:
    return any(EMBEDDING_MARK in node.name or BOUNDS_CHECK in node.name for node in oparg.walk(op))


def _rewrite_lookup(op: Op, new: RankLookup, old_pooled: list[int], new_pooled: list[int], max_dim: int) -> None:
    """Rewrite every table-carrying argument of a lookup op tree to the plan's tables."""
    count = len(new.tables)
    for node in oparg.walk(op):
        oparg.set_shape(node, "indices", [new.indices])
        oparg.set_shape(node, "offsets", [new.offsets])
        for name in PER_TABLE_ARGS:
            oparg.set_shape(node, name, [count])
        for name in CUMSUM_ARGS:
            oparg.set_shape(node, name, [count + 1])
        for name in WEIGHT_ARGS:
            shape = oparg.get_shape(node, name)
            if isinstance(shape, list) and shape and shape != [0]:
                oparg.set_shape(node, name, [new.weight_elements])
        weights = oparg.get_shape(node, "weights")
        if isinstance(weights, list) and weights and isinstance(weights[0], list):   # TensorList: weights, then per table
            oparg.set_shape(node, "weights", [[new.weight_elements]] + [[count]] * (len(weights) - 1))
        oparg.set_scalar(node, "total_D", new.total_dim)
        oparg.set_scalar(node, "max_D", max_dim)
        node.input_shapes = [new_pooled if s == old_pooled else s for s in node.input_shapes]
        concrete = node.attrs.get("concrete_inputs")
        if isinstance(concrete, list):
            node.attrs["concrete_inputs"] = [str(new_pooled) if c == str(old_pooled) else c for c in concrete]
    oparg.refresh_children(op)


def _rewrite_exchange(op: Op, send: list[int], recv: list[int], old_send: list[int], rank: int) -> float:
    """Rewrite one all_to_all to move ``send`` / ``recv`` elements per peer; returns its message size (bytes)."""
    recorded = oparg.get_scalar(op, "input_split_sizes")
    if isinstance(recorded, list) and [int(v) for v in recorded] != list(old_send):
        raise PmdbError(f"rank {rank}: an all_to_all of the source trace sends {recorded}, but its plan sends "
                        f"{old_send}: the trace set was not recorded with the plan its workload row states")
    old_numel = max(sum(old_send), _numel(oparg.get_shape(op, "output")))
    itemsize = op.comm_bytes / old_numel if old_numel and not math.isnan(op.comm_bytes) else 4.0
    oparg.set_shape(op, "output", [sum(recv)])
    oparg.set_shape(op, "input", [sum(send)])
    oparg.set_scalar(op, "output_split_sizes", list(recv))
    oparg.set_scalar(op, "input_split_sizes", list(send))
    op.comm_bytes = float(itemsize * max(sum(send), sum(recv)))
    return op.comm_bytes


def _numel(shape: Any) -> int:
    return int(np.prod(shape)) if isinstance(shape, list) and shape and all(isinstance(d, int) for d in shape) else 0


def table_rows(embedding: EmbeddingStats, num_tables: int) -> list[dict[str, Any]] | None:
    """Per-table statistics (index = table index) from a workload's per-rank statistics (every table is held by
    one rank); None when some table has none."""
    rows = {int(t["table_index"]): dict(t) for tables in embedding.per_rank.values() for t in tables
            if "table_index" in t}
    if sorted(rows) != list(range(num_tables)):
        return None
    return [rows[t] for t in range(num_tables)]


def derive(source: TraceGraph, source_ranks: Sequence[int], task: ShardTask, plan: Plan,
           stats: Sequence[dict[str, Any]]) -> DerivedPlan:
    """The plan's per-rank graphs from ``source`` (recorded with placement ``source_ranks`` of the same task
    structure); ``stats[t]`` are table t's statistics (:func:`shard.tables.table_stats`)."""
    if len(source.ranks) != task.world_size:
        raise PmdbError(f"the source trace set has {len(source.ranks)} ranks, the study {task.world_size}")
    if structure_key(task, source_ranks) != structure_key(task, plan.ranks):
        raise PmdbError(f"plan {plan.sharder} does not have the structure of the source trace (ranks holding "
                        f"tables or column reordering differ)")
    old, new = (rank_layout(list(r), task.dims, task.world_size, task.batch_size) for r in (source_ranks, plan.ranks))
    graph = copy.deepcopy(source)
    graph.measured_us, graph.trace_set_id = float("nan"), None
    oparg.fill_missing_schemas(node for rank in graph.ranks for op in rank.ops for node in oparg.walk(op))
    looks, changed, per_rank = [], 0, {}
    for r, rank_graph in enumerate(graph.ranks):
        rank_graph.measured_us = float("nan")
        lookup = _rank_lookup(r, new, stats)
        max_dim = max((stats[t]["dim"] for t in lookup.tables), default=0)
        trees = [op for op in rank_graph.ops if not op.is_collective and _is_lookup_tree(op)]
        if bool(trees) != bool(lookup.tables):
            raise PmdbError(f"rank {r}: the source trace has {len(trees)} lookup ops but the plan gives it "
                            f"{len(lookup.tables)} tables")
        for op in trees:
            _rewrite_lookup(op, lookup, [task.batch_size, old.dims[r]], [task.batch_size, new.dims[r]], max_dim)
        exchanges = [op for op in rank_graph.ops if op.collective == "all_to_all"]
        if len(exchanges) != 2:
            raise PmdbError(f"rank {r}: expected 2 all_to_all per iteration (pooled embeddings forward, gradients "
                            f"backward), the source trace has {len(exchanges)}")
        sizes = (_rewrite_exchange(exchanges[0], new.send_splits(r), new.recv_splits(r), old.send_splits(r), r),
                 _rewrite_exchange(exchanges[1], new.recv_splits(r), new.send_splits(r), old.recv_splits(r), r))
        changed += len(trees) + len(exchanges)
        looks.append(replace(lookup, comm_bytes=sizes))
        per_rank[r] = [dict(stats[t]) for t in lookup.tables]
    _launch_without_waiting(graph)
    return DerivedPlan(plan, graph, EmbeddingStats(per_rank), looks, changed)


def _launch_without_waiting(graph: TraceGraph) -> None:
    """A synchronous all_to_all's recorded CPU time includes the wait for the slowest peer under the SOURCE plan;
    every rank gets the least recorded time of that exchange (the rank that waited least), so the source plan's
    imbalance does not leak into the derived plan (the simulator adds the derived plan's own waiting)."""
    exchanges = [[op for op in rank_graph.ops if op.collective == "all_to_all"] for rank_graph in graph.ranks]
    for same in zip(*exchanges):
        times = [op.cpu_dur_us for op in same if not math.isnan(op.cpu_dur_us)]
        for op in same:
            op.cpu_dur_us = min(times) if times else op.cpu_dur_us
