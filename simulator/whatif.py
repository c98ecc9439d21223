"""What-if transformations: from the per-rank graphs of one recorded iteration (:class:`TraceGraph`), the graphs of a
configuration that was not run. Format-independent: op names, input shapes and arguments read and rewritten by
name (:mod:`pmdb.traces.oparg`), never a trace format. Each function works on a deep copy and clears the measured
times, which belong to the recorded configuration.

**Batch size** (:func:`scale_batch`, global batch ``old`` -> ``new``, factor k = new / old). The dims that carry the
batch are found by value: the rank's share of the batch (``old / world``, what data-parallel layers see) and the
whole batch (``old``, what model-parallel embedding lookups see), and the products ``dim0 * dim1`` of the shapes of
rank >= 3 that start with one of them (a batch folded with the sequence or the heads, e.g. ``[B*S, H]`` under a
``linear`` on ``[B, S, H]``). A dim carrying the batch becomes k times larger, in every nested op and in list
arguments named ``size``; at most one dim per shape does. Never scaled: arguments named like parameters
(``weight``, ``bias``, ``*weights``, the lookup's per-table arguments), every input of ``AccumulateGrad``, of
optimizer ops and of DDP's gradient-bucket copies, and shapes equal to a parameter's (or its transpose) — parameters are what ``AccumulateGrad``
receives. A GEMM whose outer dims are a parameter's is a weight gradient: only its reduced dim carries the batch.
When the batch equals a model dimension (a hidden width equal to it, say), a shape can hold both: then the first
matching dim is scaled, shapes equal to a parameter's are not protected, and the count of such shapes is reported
(:attr:`BatchScaling.ambiguous`). Embedding lookups: ``indices`` (and ``offset2bag``, ``per_sample_weights``)
grow k times (batch × pooling), ``offsets`` of T·B + 1 entries become T·kB + 1; the embedding model's per-table
``batch_size`` grows k times. all_to_all exchanges (pooled embeddings and their gradients) move k times the bytes;
every other collective keeps its size (gradients and parameters do not depend on the batch). Ops priced from the
overhead table or from their traced time keep their time. The zero share of an optimizer state an op reads
(Adam's second moment of a token embedding) falls with the samples per step: :func:`scale_zero_shares`.

**World size** (:func:`resize_world`, data parallel): every rank runs rank 0's graph; collectives keep their size
and the simulator prices them at the new world size. World size 1 drops the collectives; from world size 1, DDP's
gradient all_reduce is inserted: the gradients (the inputs of ``AccumulateGrad``, in backward order) are bucketed
like DDP (first bucket 1 MiB, then 25 MiB) and each bucket's all_reduce starts after its last gradient; the first
op after the backward waits for all of them (DDP's finalisation). Model-parallel graphs (all_to_all) are refused.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from pmdb.errors import PmdbError
from pmdb.traces import oparg
from pmdb.traces.graph import Kernel, Op, RankGraph, Stream, TraceGraph
from pmdb.traces.state_values import scaled
from simulator.embedding_stats import EmbeddingStats

EMBEDDING_MARK = "split_embedding"    # FBGEMM TBE lookup ops and their wrappers, forward and backward
BOUNDS_CHECK = "bounds_check_indices"
PER_TABLE_ARGS = ("rows_per_table", "weights_offsets", "weights_placements")
CUMSUM_ARGS = ("D_offsets", "hash_size_cumsum")
WEIGHT_ARGS = ("host_weights", "dev_weights")
ACCUMULATE_GRAD = "torch::autograd::AccumulateGrad"
GRADIENT_SCOPES = ("torch.distributed.ddp.reducer::",)   # DDP's bucket copies: gradients, whatever the batch
PARAMETER_ARGS = frozenset({"weight", "bias", "running_mean", "running_var", *PER_TABLE_ARGS, *CUMSUM_ARGS,
                            *WEIGHT_ARGS, "uvm_weights", "lxu_cache_weights", "momentum1_host", "momentum1_dev"})
COUNT_ARGS = ("indices", "offset2bag", "per_sample_weights")   # one entry per lookup: batch × pooling
GEMMS = frozenset({"aten::mm", "aten::addmm", "aten::matmul"})
BATCHED_GEMMS = frozenset({"aten::bmm", "aten::baddbmm"})
FIRST_BUCKET_BYTES = 1 << 20          # DDP's first gradient bucket (torch.distributed's default)
BUCKET_BYTES = 25 << 20               # DDP's bucket_cap_mb default
DP_COLLECTIVES = frozenset({"all_reduce", "broadcast", "barrier", "all_gather", "reduce_scatter", "reduce"})
_ITEMSIZE = {"float": 4, "double": 8, "half": 2, "c10::half": 2, "c10::bfloat16": 2, "bfloat16": 2}


@dataclass
class BatchScaling:
    """What :func:`scale_batch` did: the batch-carrying values and their new sizes, shapes rewritten, ambiguous."""

    old: int
    new: int
    values: dict[int, int] = field(default_factory=dict)
    shapes: int = 0
    ambiguous: int = 0
    exchanges: int = 0
    collisions: tuple[int, ...] = ()   # batch-carrying values that are also parameter dims

    def note(self) -> str | None:
        """One line when some shapes were ambiguous (a dim carrying the batch equal to another dim)."""
        if not self.ambiguous:
            return None
        why = (f"{', '.join(map(str, self.collisions))} is also a parameter dim" if self.collisions else
               "another dim had the same size")
        return (f"{self.ambiguous} shapes could carry the batch in more than one dim ({why}): their leading such "
                f"dim was scaled (exact for batch-first tensors; a batch no layer width equals avoids it)")


@dataclass
class WorldResize:
    """What :func:`resize_world` did."""

    old: int
    new: int
    inserted: int = 0            # gradient all_reduce buckets added (from world size 1)
    dropped: int = 0             # collectives removed (to world size 1)
    gradient_bytes: float = 0.0  # bytes all-reduced per rank and iteration


def _is_dims(shape: Any) -> bool:
    return isinstance(shape, list) and bool(shape) and all(isinstance(d, int) and not isinstance(d, bool)
                                                            for d in shape)


def _uncleared(graph: TraceGraph) -> TraceGraph:
    """A deep copy without the recorded configuration's measured times and trace set id."""
    out = copy.deepcopy(graph)
    out.measured_us, out.trace_set_id = float("nan"), None
    oparg.fill_missing_schemas(node for rank in out.ranks for op in rank.ops for node in oparg.walk(op))
    for rank in out.ranks:
        rank.measured_us = float("nan")
    return out


def _nodes(graph: TraceGraph) -> list[Op]:
    return [node for rank in graph.ranks for op in rank.ops for node in oparg.walk(op)]


def _gradient_shape(op: Op) -> list[int] | None:
    """The gradient an AccumulateGrad op (or the autograd node around it) receives."""
    for node in oparg.walk(op):
        if node.name == ACCUMULATE_GRAD and node.input_shapes and _is_dims(node.input_shapes[0]):
            return list(node.input_shapes[0])
    for name, shapes in op.children:
        if name == ACCUMULATE_GRAD and shapes and _is_dims(shapes[0]):
            return list(shapes[0])
    return None


def parameter_shapes(graph: TraceGraph) -> set[tuple[int, ...]]:
    """Shapes of the parameters (the gradients AccumulateGrad receives), and of their transposes."""
    out: set[tuple[int, ...]] = set()
    for rank in graph.ranks:
        for op in rank.ops:
            shape = _gradient_shape(op) if ACCUMULATE_GRAD in op.name else None
            if shape:
                out.add(tuple(shape))
                out.add(tuple(reversed(shape)))
    return out


def _protected_args(node: Op) -> set[int]:
    """Argument positions never scaled: parameters by name, every input of AccumulateGrad."""
    if node.name == ACCUMULATE_GRAD:
        return set(range(len(node.input_shapes)))
    names = oparg.arg_names(node.attrs.get("op_schema"))
    return {i for i, n in enumerate(names) if n in PARAMETER_ARGS or (n.endswith("weights") and n not in COUNT_ARGS)}


class _Scaler:
    """Rewrites shapes of one graph for a batch factor."""

    def __init__(self, graph: TraceGraph, old: int, new: int, world: int):
        self.k = Fraction(new, old)
        local = Fraction(old, world)
        base = {old} | ({int(local)} if local.denominator == 1 else set())
        self.params = parameter_shapes(graph)
        model_dims = {d for shape in self.params for d in shape}
        folded = set()
        for node in _nodes(graph):
            for shape in node.input_shapes:
                if _is_dims(shape) and len(shape) >= 3 and shape[0] in base and tuple(shape) not in self.params:
                    folded.add(shape[0] * shape[1])
        self.values = {v: self._grow(v) for v in sorted(base | folded)}
        self.collision = bool(model_dims & set(self.values))
        self.bases = sorted(base)
        self.result = BatchScaling(old, new, dict(self.values), collisions=tuple(sorted(model_dims & set(self.values))))

    def _grow(self, value: int) -> int:
        grown = value * self.k
        if grown.denominator != 1:
            raise PmdbError(f"a dim of {value} carrying the batch would become {float(grown):g}: give a batch size "
                            f"that scales it to a whole number")
        return int(grown)

    def shape(self, shape: Any, positions: list[int] | None = None) -> Any:
        """The shape with its batch-carrying dim scaled (``positions``: only these may carry it)."""
        if isinstance(shape, list) and shape and isinstance(shape[0], list):   # a TensorList
            return [self.shape(s) for s in shape]
        if not _is_dims(shape):
            return shape
        if positions is None and tuple(shape) in self.params and not self.collision:
            return shape
        found = [j for j, d in enumerate(shape) if d in self.values and (positions is None or j in positions)]
        if not found:
            return shape
        if len(found) > 1 or (self.collision and tuple(shape) in self.params):
            self.result.ambiguous += 1
        j = found[0]
        self.result.shapes += 1
        return [self._grow(d) if i == j else d for i, d in enumerate(shape)]

    def count(self, n: Any, name: str) -> Any:
        """A lookup-count argument: indices k times; offsets (T·B + 1 entries) T·kB + 1. A count that is not a
        multiple of the batch (the distinct indices a backward sorts out of B x L lookups, e.g. 15 275 of 15 360)
        is an expectation, not a dim: k times it, rounded to a whole count."""
        if not _is_dims(n) or len(n) != 1:
            return n
        value = n[0]
        if name == "offsets" and not any(value % b == 0 for b in self.bases):
            return [self._grow(value - 1) + 1]
        if (value * self.k).denominator != 1:
            return [max(1, round(value * self.k))]
        return [self._grow(value)]

    def node(self, node: Op) -> None:
        shapes = list(node.input_shapes)
        protected = _protected_args(node)
        names = oparg.arg_names(node.attrs.get("op_schema"))
        counted = {i for i, n in enumerate(names) if n in COUNT_ARGS or n == "offsets"}
        for i in counted:
            if i < len(shapes) and i not in protected:
                shapes[i] = self.count(shapes[i], names[i])
        rest = [i for i in range(len(shapes)) if i not in protected and i not in counted]
        if node.name in GEMMS and len(rest) >= 2:
            self._gemm(node, shapes, rest)
        elif node.name in BATCHED_GEMMS:
            for i in rest:
                shapes[i] = self.shape(shapes[i], [0])
        elif node.name == "aten::linear" and rest and _is_dims(shapes[0]):
            shapes[0] = self.shape(shapes[0], list(range(len(shapes[0]) - 1)))   # the last dim is in_features
            for i in rest[1:]:
                shapes[i] = self.shape(shapes[i])
        else:
            for i in rest:
                shapes[i] = self.shape(shapes[i])
        node.input_shapes = shapes
        for name in ("size", "shape"):       # a view's or a factory's target shape
            size = oparg.get_scalar(node, name)
            if _is_dims(size):
                oparg.set_scalar(node, name, self.shape(list(size)))

    def _gemm(self, node: Op, shapes: list[Any], rest: list[int]) -> None:
        """mm / addmm / 2-D matmul: a weight gradient (outer dims a parameter's) has the batch in its reduced dim;
        a product with a parameter (the forward, the input gradient) in the rows of the other operand."""
        a, b = rest[-2], rest[-1]
        sa, sb = shapes[a], shapes[b]
        if not (_is_dims(sa) and _is_dims(sb) and len(sa) == 2 and len(sb) == 2):
            for i in rest:
                shapes[i] = self.shape(shapes[i])
            return
        if (sa[0], sb[1]) in self.params and sa[1] in self.values:
            shapes[a], shapes[b] = self.shape(sa, [1]), self.shape(sb, [0])
        elif tuple(sb) in self.params:
            shapes[a] = self.shape(sa, [0])
        elif tuple(sa) in self.params:
            shapes[b] = self.shape(sb, [1])
        else:
            shapes[a], shapes[b] = self.shape(sa), self.shape(sb)
        for i in rest[:-2]:                       # addmm's bias: a row of the output
            shapes[i] = self.shape(shapes[i])

    def exchange(self, op: Op) -> None:
        """An all_to_all of pooled embeddings (or their gradients): k times the rows, split sizes and bytes."""
        op.input_shapes = [[self._grow(s[0]), *s[1:]] if _is_dims(s) else s for s in op.input_shapes]
        for name in ("input_split_sizes", "output_split_sizes"):
            splits = oparg.get_scalar(op, name)
            if isinstance(splits, list) and splits:
                oparg.set_scalar(op, name, [self._grow(int(v)) for v in splits])
        if not math.isnan(op.comm_bytes):
            op.comm_bytes = float(op.comm_bytes * self.k)
        self.result.exchanges += 1

    def children(self, op: Op) -> None:
        """The (name, shapes) list of nested ops: rebuilt from ``sub`` when it lists them, else scaled by value."""
        before = [name for name, _ in op.children]
        oparg.refresh_children(op)
        if op.sub and before == [node.name for node in oparg.walk(op)[1:]]:
            return
        op.children = [(name, shapes if name == ACCUMULATE_GRAD else [self.shape(s) for s in shapes])
                       for name, shapes in op.children]


def scale_batch(graph: TraceGraph, old: int, new: int, world: int | None = None,
                embedding: EmbeddingStats | None = None) -> tuple[TraceGraph, EmbeddingStats, BatchScaling]:
    """The graphs at global batch ``new`` from graphs recorded at ``old`` over ``world`` ranks (default: the graph's),
    and the embedding statistics at the new batch (see the module docstring)."""
    world = world or len(graph.ranks)
    if old <= 0 or new <= 0:
        raise PmdbError(f"batch sizes must be positive (recorded {old}, asked {new})")
    if old % world == 0 and old // world == 1:
        raise PmdbError("a recording at one sample per rank cannot show which dims carry the batch (every dim of "
                        "1 would match): record at a batch of at least 2 per rank")
    if new % world:
        raise PmdbError(f"--batch-size {new} must be a multiple of the world size {world} (data parallel: each "
                        f"rank runs {new}/{world} samples)")
    out = _uncleared(graph)
    scaler = _Scaler(out, old, new, world)
    for rank in out.ranks:
        for op in rank.ops:
            if op.collective == "all_to_all":
                scaler.exchange(op)
                continue
            if (op.is_collective or op.phase == "optimizer" or ACCUMULATE_GRAD in op.name
                    or op.name.startswith(GRADIENT_SCOPES)):
                continue                  # parameters, gradients and optimizer states do not depend on the batch
            for node in oparg.walk(op):
                scaler.node(node)
            scaler.children(op)
    stats = EmbeddingStats({r: [dict(t, batch_size=scaler._grow(int(t["batch_size"]))) for t in tables]
                            for r, tables in (embedding or EmbeddingStats()).per_rank.items()})
    return out, stats, scaler.result


def scale_zero_shares(graph: TraceGraph, ratio: float) -> int:
    """Give every op that reads a recorded zero share (:mod:`pmdb.traces.state_values`) the share after the same
    steps at ``ratio`` times the global batch (``share ** ratio``: a row no sample has reached stays zero); returns
    how many ops changed."""
    changed = 0
    for rank in graph.ranks:
        for op in rank.ops:
            for node in oparg.walk(op):
                if node.zero_frac > 0:
                    node.zero_frac = scaled(node.zero_frac, ratio)
                    changed += 1
    return changed


def _itemsize(op: Op) -> int:
    types = op.attrs.get("input_types") or op.input_types or []
    return _ITEMSIZE.get(str(types[0]).lower(), 4) if types else 4


def _renumbered(ops: list[tuple[int | None, Op]]) -> list[Op]:
    """Ops with their previous index (None for an inserted op), dependencies mapped to the new positions and
    dropped where they pointed at a removed op."""
    index = {old: new for new, (old, _) in enumerate(ops) if old is not None}
    out = []
    for _, op in ops:
        op.waits_on = tuple(index[j] for j in op.waits_on if j in index)
        out.append(op)
    return out


def _gradient_buckets(rank: RankGraph) -> tuple[list[Op], float]:
    """Rank 0's ops with DDP's gradient all_reduce inserted after the op completing each bucket; total bytes."""
    out: list[tuple[int | None, Op]] = []
    bucket, cap, total, inserted, last = 0.0, FIRST_BUCKET_BYTES, 0.0, [], None
    for i, op in enumerate(rank.ops):
        out.append((i, op))
        shape = _gradient_shape(op) if ACCUMULATE_GRAD in op.name else None
        if shape is None:
            continue
        size = float(math.prod(shape) * _itemsize(op))
        bucket += size
        total += size
        last = len(out)
        if bucket >= cap:
            out.append((None, _all_reduce(bucket)))
            inserted.append(len(out) - 1)
            bucket, cap = 0.0, BUCKET_BYTES
    if bucket > 0 and last is not None:
        out.insert(last, (None, _all_reduce(bucket)))
        inserted.append(last)
    if not inserted:
        raise PmdbError("the recorded graph has no gradient (no AccumulateGrad op in its backward): there is "
                        "nothing for data-parallel ranks to all-reduce")
    positions = [i for i, (old, _) in enumerate(out) if old is None]
    ops = _renumbered(out)
    after = next((i for i in range(positions[-1] + 1, len(ops)) if ops[i].phase != "bw"), None)
    if after is not None:       # DDP's finalisation: the optimizer reads every reduced gradient
        ops[after].waits_on = tuple(sorted(set(ops[after].waits_on) | set(positions)))
    return ops, total


def _all_reduce(size: float) -> Op:
    return Op(name="c10d::allreduce_", kernels=[Kernel(Stream.COMM, name="c10d::allreduce_")], collective="all_reduce",
              comm_bytes=float(size), input_shapes=[[[int(size // 4)]]], phase="bw",
              attrs={"what_if": "DDP gradient bucket"})


def resize_world(graph: TraceGraph, new: int) -> tuple[TraceGraph, WorldResize]:
    """The data-parallel graphs of ``new`` ranks (see the module docstring)."""
    old = len(graph.ranks)
    if new < 1:
        raise PmdbError(f"--world-size must be at least 1 (got {new})")
    out = _uncleared(graph)
    info = WorldResize(old, new)
    if new == old:
        return out, info
    kinds = {op.collective for rank in out.ranks for op in rank.ops if op.is_collective}
    model_parallel = sorted(k for k in kinds if k not in DP_COLLECTIVES)
    if model_parallel:
        raise PmdbError(f"the recorded ranks exchange data ({', '.join(model_parallel)}): a model-parallel "
                        f"program cannot change its world size by copying a rank; record it at world size {new} "
                        f"(for DLRM tables, `pmdb shard` derives plans at a recorded world size)")
    base = out.ranks[0]
    if new == 1:
        kept = [(i, op) for i, op in enumerate(base.ops) if not op.is_collective]
        info.dropped = len(base.ops) - len(kept)
        ops = _renumbered(kept)
    elif not kinds:
        ops, info.gradient_bytes = _gradient_buckets(base)
        info.inserted = sum(op.is_collective for op in ops)
    else:
        ops = base.ops
        info.gradient_bytes = float(sum(op.comm_bytes for op in ops if op.collective == "all_reduce"
                                        and not math.isnan(op.comm_bytes)))
    template = RankGraph(0, ops, iteration=base.iteration, tail_us=base.tail_us)
    out.ranks = [template] + [copy.deepcopy(template) for _ in range(new - 1)]
    for r, rank in enumerate(out.ranks):
        rank.rank = r
    return out.validate(), info
