"""Data-, tensor- and pipeline-parallel training steps derived from one GPU's graph (a shape-only capture of a
GPT-2-style transformer: fused QKV ``addmm``, heads in 4-D attention tensors, one ``layer_norm`` before the attention
and one before the MLP of each layer, a final one, a (tied) token embedding and a vocabulary-wide cross-entropy).

Megatron-LM's layout, on the graph of one micro-batch (:func:`scale_batch` first: batch / (D·M) per rank):

* **tensor parallel T** (:func:`tensor_parallel`): the QKV and first MLP GEMMs keep 1/T of their output columns, the
  attention output and second MLP GEMMs 1/T of their reduced dim, every attention-head tensor 1/T of its heads and
  every ``[.., 3H]`` / ``[.., 4H]`` element-wise op 1/T of its columns; the token embedding, the logits GEMMs and the
  cross-entropy 1/T of the vocabulary padded as Megatron pads it (to a multiple of 128·T). Layer norms, residual
  adds and dropouts on ``[b, S, H]`` are replicated. All-reduces of ``b·S·H`` values: after the attention output and
  the second MLP GEMM in the forward, after the input-gradient GEMMs of QKV and of the first MLP GEMM in the
  backward (Megatron's f and g), after the vocab-parallel embedding, after the logits' input gradient; three of
  ``b·S`` values in the vocab-parallel cross-entropy (max, sum of exponentials, target logit). The op after an
  all-reduce waits for it.
* **pipeline parallel P** (:func:`split_stages`): layers cut into P equal runs at their first ``layer_norm`` (the
  embedding with stage 0, the final norm, logits and loss with the last stage); the backward cut after the matching
  ``native_layer_norm_backward`` (and the gradient ``add_`` ops it is followed by). Between stages Megatron sends
  each micro-batch's ``[S, b, H]`` activation (and its gradient back) point to point (``megatron/p2p_communication.py``
  of the ``megatron.schedules`` that accelerate's plugin drives); under tensor parallel each tensor rank sends 1/T of
  it and the receivers all-gather it (``scatter_gather_tensors_in_pipeline``, on by default):
  :func:`pipeline_send_us`. The last stage keeps its own copy of the tied word embedding for the logits, so after
  the pipeline the first and last stages all-reduce that table's gradient (``allreduce_word_embedding_grads`` /
  ``_allreduce_word_embedding_grads`` in ``finalize_model_grads``; V/T x H values): :func:`tied_embedding_us`.
* **data parallel D** (:func:`gradient_buckets`): each stage's last micro-batch backward all-reduces its gradients
  in DDP's buckets (first 1 MiB, then 25 MiB) as they complete (a gradient is the ``add_`` into a parameter-shaped
  tensor in the backward, or an ``AccumulateGrad``), overlapping the rest of the backward; the chunk ends when the
  last bucket is reduced.

Each stage's forward and backward chunks are priced by the session's models and simulated alone (Algorithm 1 on one
rank); collectives and point-to-point sends are priced by :class:`CommPricer` at their group size. The 1F1B schedule
over M micro-batches (:func:`one_f_one_b`, with M = 1 the stages run one after another) gives the step as rank 0
times it: the end of stage 0's last backward, then the tied-embedding all-reduce. Megatron's optimizer step (and
its gradient-norm clipping) is not in the derived step. Times µs, sizes bytes.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from pmdb.errors import PmdbError
from pmdb.traces import oparg
from pmdb.traces.graph import Kernel, Op, RankGraph, Stream, TraceGraph
from simulator.model_set import ModelSet

FIRST_BUCKET_BYTES = 1 << 20          # DDP's first gradient bucket
BUCKET_BYTES = 25 << 20               # DDP's bucket_cap_mb default (25 MiB)
VOCAB_MULTIPLE = 128                  # Megatron's make_vocab_size_divisible_by
COMM_OP = "nccl:"                     # name prefix of the collectives inserted here
FLOAT_BYTES = 4                       # fp32 activations and gradients


@dataclass(frozen=True)
class ParallelSpec:
    """D data-parallel ranks, T tensor-parallel, P pipeline stages, M micro-batches; ``gpus`` the GPUs named."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    micro_batches: int = 1
    gpus: int | None = None
    fused: bool = False          # drop what Megatron's fused kernels do apart (:func:`megatron_fusions`)

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    def tag(self) -> str:
        """'dp4', 'tp2 pp2 m4', ...: the factors above 1."""
        parts = [f"{k}{v}" for k, v in (("dp", self.dp), ("tp", self.tp), ("pp", self.pp)) if v > 1]
        if self.micro_batches > 1:
            parts.append(f"m{self.micro_batches}")
        return " ".join(parts + (["fused"] if self.fused else [])) or "dp1"


@dataclass(frozen=True)
class ModelDims:
    """What the graph says about the model: hidden width H, heads, layers, vocabulary V, sequence S, batch."""

    hidden: int
    heads: int
    layers: int
    vocab: int
    seq: int
    batch: int


@dataclass(frozen=True)
class LinkFigures:
    """Link figures that price a collective no model covers: per-direction bandwidth (GB/s) and efficiency, latency
    per ring step (µs), inside one node of ``node_gpus`` GPUs and across nodes. Defaults: an A100 SXM4 node
    (NVLink 3, 300 GB/s per direction, 8 GPUs per NVSwitch) and one 200 Gb/s NIC per GPU."""

    nvlink_gbps: float = 300.0
    nic_gbps: float = 25.0
    efficiency: float = 0.7
    nvlink_latency_us: float = 2.5
    nic_latency_us: float = 5.0
    node_gpus: int = 8

    def name(self, group: int) -> str:
        if group > self.node_gpus:
            return (f"link figures: network {self.nic_gbps:g} GB/s x{self.efficiency:g}, "
                    f"{self.nic_latency_us:g} us/step")
        return (f"link figures: NVLink {self.nvlink_gbps:g} GB/s x{self.efficiency:g}, "
                f"{self.nvlink_latency_us:g} us/step")

    def time_us(self, kind: str, group: int, size: float) -> float:
        """Ring all-reduce (2(n-1) steps of size/n), ring all-gather of ``size`` bytes in all (n-1 steps of size/n)
        or one send of ``size`` bytes."""
        across = group > self.node_gpus
        bw = (self.nic_gbps if across else self.nvlink_gbps) * self.efficiency * 1e3   # bytes per µs
        lat = self.nic_latency_us if across else self.nvlink_latency_us
        if kind == "send":
            return lat + size / bw
        steps = (group - 1) * (1 if kind == "all_gather" else 2)
        return steps * lat + steps * size / group / bw


class CommPricer:
    """Prices collectives at their group size: the target's collective model at that world size where one exists
    (a send of m bytes by the 2-rank all_reduce model: each byte crosses the link once each way, as in a send; an
    all-gather with no model of its own by half the all_reduce model of its group and total size: a ring all-reduce
    is a reduce-scatter then an all-gather), else the link figures. Remembers what priced each (``label``, by
    default kind@group)."""

    def __init__(self, models: ModelSet, link: LinkFigures | None = None):
        self.models, self.link = models, link or LinkFigures()
        self.used: dict[str, str] = {}
        self._cache: dict[tuple[str, int, float], float] = {}

    def _model(self, kind: str, group: int) -> tuple[Any, float, str]:
        """(model ref or None, factor on its time, how it stands in) for one kind at one group size."""
        if kind == "send":
            return self.models.collective("all_reduce", 2), 1.0, " (2-rank all_reduce)"
        own = self.models.collective(kind, group)
        if own is not None or kind != "all_gather":
            return own, 1.0, ""
        return self.models.collective("all_reduce", group), 0.5, " (half: all_reduce = reduce-scatter + all-gather)"

    def time_us(self, kind: str, group: int, size: float, label: str | None = None) -> float:
        if group <= 1 or size <= 0:
            return 0.0
        key = (kind, group, float(size))
        label = label or f"{kind}@{group}"
        ref, factor, how = self._model(kind, group)
        if key not in self._cache:
            if ref is not None:
                self._cache[key] = factor * float(ref.model.predict(pd.DataFrame({"max_rank_bytes": [float(size)]}))[0])
            else:
                self._cache[key] = self.link.time_us(kind, group, size)
        self.used[label] = f"{ref.name}:{ref.version}{how}" if ref is not None else self.link.name(group)
        return self._cache[key]


def _dims(shape: Any) -> bool:
    return isinstance(shape, list) and bool(shape) and all(isinstance(d, int) and not isinstance(d, bool)
                                                           for d in shape)


def _fw(rank: RankGraph) -> list[Op]:
    return [op for op in rank.ops if op.phase == "fw"]


def model_dims(graph: TraceGraph) -> ModelDims:
    """H, heads, layers, V, S and the batch of rank 0's graph (refused where it is not a GPT-2-style transformer)."""
    ops = graph.ranks[0].ops
    norms = [op for op in _fw(graph.ranks[0]) if op.name == "aten::layer_norm"]
    embeds = [op for op in ops if op.name == "aten::embedding" and op.input_shapes and _dims(op.input_shapes[0])]
    softmax = [op for op in ops if op.name in ("aten::softmax", "aten::_softmax") and op.input_shapes
               and _dims(op.input_shapes[0]) and len(op.input_shapes[0]) == 4]
    if not norms or not embeds or not softmax or (len(norms) - 1) % 2:
        raise PmdbError("tensor/pipeline parallel what-ifs need a GPT-2-style transformer capture (embedding, "
                        "two layer norms per layer and a final one, attention softmax over heads): this graph "
                        "is not one")
    hidden = int(norms[0].input_shapes[0][-1])
    batch, heads, seq = (int(v) for v in softmax[0].input_shapes[0][:3])
    vocab = int(max(embeds, key=lambda op: op.input_shapes[0][0]).input_shapes[0][0])
    return ModelDims(hidden, heads, (len(norms) - 1) // 2, vocab, seq, batch)


def check(spec: ParallelSpec, dims: ModelDims, batch: int) -> None:
    """Refuse combinations Megatron cannot run, in one line each."""
    for name, value in (("--data-parallel", spec.dp), ("--tensor-parallel", spec.tp),
                        ("--pipeline-parallel", spec.pp), ("--micro-batches", spec.micro_batches)):
        if value < 1:
            raise PmdbError(f"{name} must be at least 1 (got {value})")
    if dims.heads % spec.tp:
        raise PmdbError(f"--tensor-parallel {spec.tp} does not divide the {dims.heads} attention heads")
    if (4 * dims.hidden) % spec.tp or dims.hidden % spec.tp:
        raise PmdbError(f"--tensor-parallel {spec.tp} does not divide the hidden width {dims.hidden}")
    if dims.layers % spec.pp:
        raise PmdbError(f"--pipeline-parallel {spec.pp} does not divide the {dims.layers} layers")
    if spec.gpus is not None and spec.world != spec.gpus:
        raise PmdbError(f"D x T x P = {spec.dp} x {spec.tp} x {spec.pp} = {spec.world} GPUs, but --gpus is "
                        f"{spec.gpus}")
    share = spec.dp * spec.micro_batches
    if batch % share:
        raise PmdbError(f"the global batch {batch} does not divide into {spec.dp} data-parallel ranks x "
                        f"{spec.micro_batches} micro-batches")


def padded_vocab(vocab: int, tp: int) -> int:
    """Megatron's padded vocabulary: the next multiple of 128·T."""
    step = VOCAB_MULTIPLE * tp
    return -(-vocab // step) * step


def activation_bytes(dims: ModelDims, micro: int) -> float:
    """One micro-batch's ``[S, b, H]`` activation between layers (fp32), bytes."""
    return float(micro * dims.seq * dims.hidden * FLOAT_BYTES)


def pipeline_send_us(pricer: CommPricer, dims: ModelDims, micro: int, tp: int) -> float:
    """One stage-to-stage transfer of a micro-batch's activation (or its gradient): a send of 1/T of it from each
    tensor rank, then an all-gather over the T tensor ranks (Megatron's scatter-gather of pipeline tensors; one
    plain send without tensor parallel). µs."""
    size = activation_bytes(dims, micro)
    send = pricer.time_us("send", 2, size / tp, label="pipeline send@2")
    return send + (pricer.time_us("all_gather", tp, size, label=f"pipeline all_gather@{tp}") if tp > 1 else 0.0)


def embedding_bytes(dims: ModelDims, tp: int) -> float:
    """A tensor rank's shard of the (padded) word embedding: V/T x H fp32 values, bytes."""
    return float(padded_vocab(dims.vocab, tp) // tp * dims.hidden * FLOAT_BYTES)


def tied_embedding_us(pricer: CommPricer, dims: ModelDims, spec: ParallelSpec) -> float:
    """The all-reduce of the tied word embedding's gradient between the first and the last stage after the pipeline
    (none without pipeline parallel: one copy of the table), µs."""
    if spec.pp <= 1:
        return 0.0
    return pricer.time_us("all_reduce", 2, embedding_bytes(dims, spec.tp), label="tied embedding all_reduce@2")


def comm_op(kind: str, group: int, size: float, phase: str, why: str, pricer: CommPricer,
            blocking: bool = False) -> Op:
    """An inserted collective (``kind`` all_reduce or send) of ``size`` bytes over ``group`` ranks, pre-priced
    (``blocking``: the next op reads its result)."""
    return Op(name=f"{COMM_OP}{kind}", collective=f"{kind}@{group}", comm_bytes=float(size), phase=phase,
              kernels=[Kernel(Stream.COMM, dur_us=pricer.time_us(kind, group, size), name=f"{COMM_OP}{kind}")],
              input_shapes=[[int(size // FLOAT_BYTES)]], attrs={"what_if": why, "blocking": blocking})


class _Cutter:
    """Rewrites one micro-batch's shapes for tensor parallel T (see the module docstring)."""

    def __init__(self, dims: ModelDims, tp: int, micro: int):
        h, self.t = dims.hidden, tp
        self.h, self.heads, self.micro = h, dims.heads, micro
        self.values = {3 * h: 3 * h // tp, 4 * h: 4 * h // tp,
                       dims.vocab: padded_vocab(dims.vocab, tp) // tp}
        self.cut = 0

    def shape(self, shape: Any, bmm: bool = False) -> Any:
        if isinstance(shape, list) and shape and isinstance(shape[0], list):
            return [self.shape(s, bmm) for s in shape]
        if not _dims(shape):
            return shape
        out = list(shape)
        if len(out) == 4 and out[1] == self.heads:
            out[1] //= self.t
        elif len(out) == 4 and out[2] == self.heads:
            out[2] //= self.t
        elif bmm and len(out) == 3 and out[0] == self.micro * self.heads:
            out[0] //= self.t
        else:
            for j, d in enumerate(out):
                if d in self.values:
                    out[j] = self.values[d]
                    break
        self.cut += out != list(shape)
        return out

    def node(self, node: Op) -> None:
        s, h = node.input_shapes, self.h
        if node.name == "aten::addmm" and len(s) >= 3 and s[2] == [h, h]:          # attention output (row-parallel)
            node.input_shapes = [s[0], [s[1][0], h // self.t], [h // self.t, h], *s[3:]]
        elif node.name == "aten::mm" and len(s) >= 2 and s[1] == [h, h] and _dims(s[0]) and s[0][1] == h:
            node.input_shapes = [s[0], [h, h // self.t], *s[2:]]                    # its input gradient
        elif node.name == "aten::mm" and len(s) >= 2 and _dims(s[0]) and _dims(s[1]) and s[0][0] == h \
                and s[1][1] == h and s[0][1] == s[1][0] and s[0][1] != h:
            node.input_shapes = [[h // self.t, s[0][1]], s[1], *s[2:]]              # its weight gradient
        elif node.name == "aten::add_" and s and s[0] == [h, h]:
            node.input_shapes = [[h // self.t, h] if x == [h, h] else x for x in s]
        elif node.name == "aten::cat" and s and isinstance(s[0], list) and len(s[0]) == 3 \
                and all(_dims(x) and x[-1] == h for x in s[0]):                       # q, k, v gradients
            node.input_shapes = [[[*x[:-1], h // self.t] for x in s[0]], *s[1:]]
        else:
            bmm = node.name in ("aten::bmm", "aten::baddbmm")
            node.input_shapes = [self.shape(x, bmm) for x in s]
        for name in ("num_weights",):
            value = oparg.get_scalar(node, name)
            if isinstance(value, int) and value in self.values:
                oparg.set_scalar(node, name, self.values[value])

    def op(self, op: Op) -> None:
        for node in oparg.walk(op):
            self.node(node)
        before = [name for name, _ in op.children]
        oparg.refresh_children(op)
        if not (op.sub and before == [n.name for n in oparg.walk(op)[1:]]):
            op.children = [(name, [self.shape(x, name in ("aten::bmm", "aten::baddbmm")) for x in shapes])
                           for name, shapes in op.children]


def _all_reduce_after(op: Op, dims: ModelDims) -> str | None:
    """Why an all-reduce of b·S·H follows this (uncut) op under tensor parallel, or None."""
    s, h = op.input_shapes, dims.hidden
    if op.phase == "fw" and op.name == "aten::addmm" and len(s) >= 3 and s[2] in ([h, h], [4 * h, h]):
        return "row-parallel output"
    if op.phase == "fw" and op.name == "aten::embedding" and s and s[0] == [dims.vocab, h]:
        return "vocab-parallel embedding"
    if op.phase == "bw" and op.name == "aten::mm" and len(s) >= 2 and s[1] in ([3 * h, h], [4 * h, h],
                                                                                [dims.vocab, h]):
        return "column-parallel input gradient"
    return None


def tensor_parallel(graph: TraceGraph, dims: ModelDims, tp: int, micro: int, pricer: CommPricer, *,
                    in_place: bool = False) -> tuple[TraceGraph, int]:
    """Rank 0's micro-batch graph cut for T ranks with Megatron's all-reduces inserted; (graph, shapes cut).
    ``in_place``: rewrite ``graph`` itself (a copy already made), else a deep copy."""
    out = graph if in_place else copy.deepcopy(graph)
    rank = out.ranks[0]
    cutter = _Cutter(dims, tp, micro)
    act = micro * dims.seq * dims.hidden * FLOAT_BYTES
    ops: list[Op] = []
    for op in rank.ops:
        why = _all_reduce_after(op, dims)
        cutter.op(op)
        ops.append(op)
        if why:
            ops.append(comm_op("all_reduce", tp, act, op.phase, f"tensor parallel: {why}", pricer, True))
        elif op.name == "aten::cross_entropy_loss":
            for what in ("max", "sum of exponentials", "target logit"):
                ops.append(comm_op("all_reduce", tp, micro * dims.seq * FLOAT_BYTES, op.phase,
                                   f"vocab-parallel cross-entropy: {what}", pricer, True))
    rank.ops = ops
    return out, cutter.cut


def chunk(ops: list[Op]) -> list[Op]:
    """Copies of a run of ops as a program of its own: recorded dependencies dropped (they index the whole graph),
    and each op right after a blocking inserted collective waiting for it."""
    out = [copy.copy(op) for op in ops]        # shapes are shared (never rewritten after this), dependencies not
    for i, op in enumerate(out):
        before = out[i - 1] if i else None
        op.waits_on = (i - 1,) if before is not None and before.attrs.get("blocking") and not op.is_collective \
            else ()
    return out


def _norm_positions(ops: list[Op], name: str, phase: str) -> list[int]:
    return [i for i, op in enumerate(ops) if op.name == name and op.phase == phase]


def split_stages(ops: list[Op], dims: ModelDims, pp: int) -> list[tuple[list[Op], list[Op]]]:
    """Per stage, (forward + loss ops, backward ops) of one micro-batch (see the module docstring)."""
    fw_end = next((i for i, op in enumerate(ops) if op.phase == "bw"), len(ops))
    forward, backward = ops[:fw_end], [op for op in ops[fw_end:] if op.phase == "bw"]
    if pp == 1:
        return [(forward, backward)]
    per = dims.layers // pp
    starts = _norm_positions(forward, "aten::layer_norm", "fw")        # 2 per layer, then the final norm
    fw_cuts = [0] + [starts[2 * per * s] for s in range(1, pp)] + [len(forward)]
    ends = _norm_positions(backward, "aten::native_layer_norm_backward", "bw")   # final, then 2 per layer, last first
    bw_cuts = [0]
    for s in range(pp - 1, 0, -1):                 # stage s's backward ends after its first layer's first norm
        i = ends[2 + 2 * (dims.layers - 1 - s * per)] + 1
        while i < len(backward) and backward[i].name == "aten::add_":
            i += 1
        bw_cuts.append(i)
    bw_cuts.append(len(backward))
    bw_parts = [backward[a:b] for a, b in zip(bw_cuts, bw_cuts[1:])][::-1]   # stage 0 first
    return [(forward[a:b], part) for (a, b), part in zip(zip(fw_cuts, fw_cuts[1:]), bw_parts)]


def forward_parameters(ops: list[Op]) -> set[tuple[int, ...]]:
    """Parameters of a forward: GEMM weights and biases, norm weights, embedding tables (by argument name)."""
    out: set[tuple[int, ...]] = set()
    for op in ops:
        names = oparg.arg_names(op.attrs.get("op_schema"))
        for i, shape in enumerate(op.input_shapes):
            name = names[i] if i < len(names) else ""
            is_param = name in ("weight", "bias") or (op.name == "aten::addmm" and i in (0, 2)) \
                or (op.name == "aten::embedding" and i == 0) or (op.name == "aten::layer_norm" and i in (2, 3))
            if is_param and _dims(shape):
                out.add(tuple(shape))
    return out


def gradient_buckets(ops: list[Op], params: set[tuple[int, ...]], dp: int,
                     pricer: CommPricer) -> tuple[list[Op], float]:
    """A backward chunk with DDP's bucketed all-reduces inserted after the op completing each bucket; bytes."""
    out: list[Op] = []
    bucket, cap, total = 0.0, float(FIRST_BUCKET_BYTES), 0.0
    for op in ops:
        out.append(op)
        shape = None
        if "AccumulateGrad" in op.name and op.input_shapes and _dims(op.input_shapes[0]):
            shape = op.input_shapes[0]
        elif op.name == "aten::add_" and len(op.input_shapes) >= 2 and _dims(op.input_shapes[0]) \
                and op.input_shapes[0] == op.input_shapes[1] and tuple(op.input_shapes[0]) in params:
            shape = op.input_shapes[0]
        if shape is None:
            continue
        size = float(math.prod(shape) * FLOAT_BYTES)
        bucket += size
        total += size
        if bucket >= cap:
            out.append(comm_op("all_reduce", dp, bucket, "bw", "data parallel: gradient bucket", pricer))
            bucket, cap = 0.0, float(BUCKET_BYTES)
    if bucket > 0:
        out.append(comm_op("all_reduce", dp, bucket, "bw", "data parallel: gradient bucket", pricer))
    return chunk(out), total


@dataclass
class Schedule:
    """A pipeline schedule's outcome (µs): rank 0's step, every stage's end and busy time."""

    step_us: float
    stage_end_us: list[float]
    stage_busy_us: list[float]

    @property
    def bubble_share(self) -> float:
        """Share of stage 0's step in which it computes nothing (waits for the other stages)."""
        return 1.0 - self.stage_busy_us[0] / self.step_us if self.step_us > 0 else 0.0


def one_f_one_b(fw_us: list[float], bw_us: list[float], bw_last_us: list[float], micro: int,
                send_us: float, embedding_us: float = 0.0) -> Schedule:
    """Megatron's 1F1B over P stages and ``micro`` micro-batches: stage s runs min(P-s-1, M) forwards, then
    alternates one forward and one backward, then drains; a forward waits for the previous stage's forward of the
    same micro-batch (plus the send), a backward for the next stage's backward. The last micro-batch's backward
    costs ``bw_last_us`` (with the data-parallel all-reduces). With P > 1, the first and the last stage then
    all-reduce the tied embedding's gradient (``embedding_us``) once both are done."""
    p = len(fw_us)
    orders = []
    for s in range(p):
        warm = min(p - s - 1, micro)
        order = [("F", m) for m in range(warm)]
        f, b = warm, 0
        while f < micro:
            order += [("F", f), ("B", b)]
            f, b = f + 1, b + 1
        order += [("B", m) for m in range(b, micro)]
        orders.append(order)
    done: dict[tuple[str, int, int], float] = {}
    free, busy, pos = [0.0] * p, [0.0] * p, [0] * p
    while any(pos[s] < len(orders[s]) for s in range(p)):
        moved = False
        for s in range(p):
            while pos[s] < len(orders[s]):
                kind, m = orders[s][pos[s]]
                if kind == "F":
                    dep = 0.0 if s == 0 else done.get(("F", s - 1, m))
                    dep = dep if s == 0 or dep is None else dep + send_us
                    cost = fw_us[s]
                else:
                    dep = done.get(("F", s, m)) if s == p - 1 else done.get(("B", s + 1, m))
                    dep = dep if s == p - 1 or dep is None else dep + send_us
                    cost = bw_last_us[s] if m == micro - 1 else bw_us[s]
                if dep is None:
                    break
                start = max(free[s], dep)
                free[s] = done[(kind, s, m)] = start + cost
                busy[s] += cost
                pos[s] += 1
                moved = True
        if not moved:
            raise PmdbError("the pipeline schedule deadlocked (a bug: please report it)")
    if p > 1 and embedding_us > 0:
        free[0] = free[p - 1] = max(free[0], free[p - 1]) + embedding_us
    return Schedule(free[0], list(free), busy)


GELU_PARTS = frozenset({"aten::mul", "aten::pow", "aten::add", "aten::add_", "aten::tanh", "aten::tanh_backward"})
GELU_KEPT = frozenset({"aten::tanh", "aten::tanh_backward"})   # the one pass a fused bias-GELU kernel makes
HALF_TYPES = ("half", "bfloat16")                               # in a recorded input type, e.g. Tensor(c10::Half)


def half_precision(op: Op) -> bool:
    """Whether the op's first input is recorded as fp16/bf16 (shape-only captures record no types: fp32)."""
    return bool(op.input_types) and any(h in str(op.input_types[0]).lower() for h in HALF_TYPES)


def megatron_fusions(ops: list[Op], dims: ModelDims, tp: int = 1) -> tuple[list[Op], int]:
    """Drop what Megatron's fused kernels do in passes that the captured eager ops make apart: every element-wise op
    of the tanh GELU on ``[b, S, 4H/T]`` but one pass per direction — bias-GELU (a TorchScript function, any
    dtype); the residual add after a dropout in the forward — bias-dropout-add (TorchScript); and, only where the
    attention scores are fp16/bf16, the scale and mask before a softmax over heads (and the scale's gradient) —
    ``FusedScaleMaskSoftmax`` runs its CUDA kernel only for half-precision input (``is_kernel_available``) and
    scales, masks and softmaxes in separate passes in fp32. (kept ops, dropped count). An estimate of what the
    eager capture over-counts, not Megatron's kernels themselves (their own times are taken as one eager pass)."""
    wide = 4 * dims.hidden // tp
    out, dropped = [], 0
    for i, op in enumerate(ops):
        shape = op.input_shapes[0] if op.input_shapes and _dims(op.input_shapes[0]) else None
        scores = shape is not None and len(shape) == 4 and shape[2] == shape[3] == dims.seq and shape[1] != 1 \
            and half_precision(op)
        nxt = ops[i + 1].name if i + 1 < len(ops) else ""
        prev = ops[i - 1].name if i else ""
        if scores and op.name in ("aten::mul", "aten::add") and (
                (op.phase == "fw" and "softmax" in (nxt + ops[min(i + 2, len(ops) - 1)].name))
                or (op.phase == "bw" and "softmax_backward" in prev)):
            dropped += 1
            continue
        if shape is not None and len(shape) == 3 and shape[-1] == wide and op.name in GELU_PARTS \
                and op.name not in GELU_KEPT:
            dropped += 1
            continue
        if op.phase == "fw" and op.name == "aten::add" and prev == "aten::dropout" and shape is not None \
                and len(shape) == 3 and shape[-1] == dims.hidden:
            dropped += 1
            continue
        out.append(op)
    return out, dropped
