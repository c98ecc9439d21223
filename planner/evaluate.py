"""Iteration time, breakdown and memory of every candidate configuration, vectorised.

Per micro-batch and stage: layers × (forward + backward + recomputation) plus the embedding on the first stage and
the LM head on the last, plus pipeline send/recv. 1F1B: the iteration runs every stage's micro-batch once and the
slowest stage m − 1 more times, so time = m·max_i T_i + (Σ_i T_i − max_i T_i); the second term is the bubble
((pp − 1)/m of the pipeline time when stages are equal). Then the data-parallel gradient reduction (and parameter
all-gather with the distributed optimizer), overlapped with per-layer compute except one layer's share when the
framework overlaps it; the tied-embedding all-reduce between the first and last stage; the optimizer step.

A fitted planner calibration (planner/fitting.py) adds to every stage's micro-batch time
``layers/pp · layer_fixed + microbatch_fixed`` (under 'overhead'; through the 1F1B formula it also lengthens the
bubble), to every GEMM launch its ``gemm_latency``;
the host runs ahead of the GPU: a stage's micro-batch takes ``max(device time, host time)`` (or, with a fitted
``overlap_sharpness`` p, the soft maximum ``(device^p + host^p)^(1/p)``) where host time is its kernels ×
``kernel_overhead`` plus the fixed costs; a collective pays the fitted ``collective_fixed`` per call and, inside
one NVLink domain, ``(n − 1) · collective_latency``.

Terms as Megatron-DeepSpeed runs them (framework ``megatron-deepspeed``):

- full activation recomputation: every layer's forward runs again before its backward,
  ``T_layer = T_fwd + T_bwd + T_fwd``; selective recomputation re-runs only the attention core;
- 1F1B: ``T = m · max_i T_i + (Σ_i T_i − max_i T_i)`` with T_i the per-micro-batch time of stage i (including
  the blocking send/recv of ``mb · s · h · e`` bytes forward and back); equal stages give the bubble
  ``(pp − 1) · T_stage``;
- data-parallel gradient reduction: ring all-reduce of ``e · params_stage`` bytes,
  ``2 (dp − 1)/dp · bytes / bw + 2 (dp − 1) · latency``, after the backward pass without overlap; with overlap
  only ``max(T/L, T − (L − 1) · T_bwd_layer)`` stays exposed;
- optimizer step (mixed-precision Adam, fp32 master weights): ``params_shard · 48 B / (HBM bw · eff)`` +
  6 kernel overheads (see OPTIMIZER_STEP_BYTES);
- mixed precision: GEMMs at the fp16 tensor-core peak, weights/gradients 2 B, optimizer state 12 B per parameter
  (planner/memory.py).

Priced many times (a calibration fit): :func:`prepare` once what depends on neither the system nor a calibration,
:func:`evaluate_prepared` under each; :func:`merge` joins several models' prepared candidates into one evaluation.
The numbers are bit-for-bit those of :func:`evaluate`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from planner import strategies
from planner.candidates import Candidates, Framework
from planner.costs import Op
from planner.memory import StageParams, memory_per_gpu, optimizer_shards, stage_params
from planner.model import Transformer
from planner.stacked import Collectives, Stacked, collectives, concat_collectives, concat_stacked, stack
from planner.system import DTYPE_BYTES, System
from planner.timing import Parts, Timer, expand, add, pick, scale, total

# HBM traffic of one mixed-precision Adam step per parameter: fp16/bf16 gradient read and fp32 copy written (2 + 4),
# overflow check and gradient norm read the fp32 gradient twice (8), Adam reads master weight, m, v, gradient (16)
# and writes master weight, m, v (12), the fp16/bf16 weight copy reads 4 and writes 2 (6).
OPTIMIZER_STEP_BYTES = 48
OPTIMIZER_KERNELS = 6

BREAKDOWN_KEYS = ("compute", "memory", "overhead", "tp_comm", "cp_comm", "summa_comm", "pp_comm", "bubble", "dp_comm",
                  "emb_sync", "optimizer")


@dataclass
class Evaluation:
    """Per candidate: ``time`` (s), ``parts`` (s per breakdown key, summing to time), ``memory`` (bytes per part
    and 'total'), ``fits`` (total within the usable HBM), and which source timed GEMMs and collectives."""

    time: np.ndarray
    parts: Parts
    memory: dict[str, np.ndarray]
    fits: np.ndarray
    usage: dict[str, dict[str, int]]


@dataclass
class Prepared:
    """Candidates of one strategy with what depends on neither the system nor a calibration: the map to unique
    (t1, t2, mb, panels) keys, the layer's steps, each timed block stacked once (:mod:`planner.stacked`), the
    parameters per stage and the memory per GPU (bytes). :func:`evaluate_prepared` prices it under any system
    and calibration (a calibration fit: hundreds of times)."""

    c: Candidates
    fw: Framework
    inv: np.ndarray
    keys: int                                      # unique keys: the columns of the blocks' op arrays
    layers: np.ndarray                             # layers per stage (float)
    blocks: dict[str, Stacked]
    params: StageParams
    memory: dict[str, np.ndarray]
    send_recv: Collectives                         # pipeline send/recv, both directions
    grad: list[tuple[np.ndarray, str, Collectives]]  # (candidates, 'reduce' or 'gather', data-parallel collective)
    emb_sync: Collectives | None                   # tied-embedding all-reduce (None: untied)
    merged: bool = False                           # several models' candidates (:func:`merge`)


def prepare(model: Transformer, c: Candidates, fw: Framework, *, reuse: bool = False) -> Prepared:
    """The system- and calibration-free part of :func:`evaluate`; ``reuse``: to be priced many times (the
    blocks' collectives are stacked too, :func:`planner.stacked.stack`)."""
    keys = np.stack([c.t1, c.t2, c.mb, c.panels], axis=1)
    _, first_index, inv = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    costs = strategies.build(model, c.take(first_index), fw)
    on = (c, inv) if reuse else (None, None)
    blocks = {"fwd": stack(costs.fwd, *on), "bwd": stack(costs.bwd, *on),
              "selective": stack([s for s in costs.fwd if isinstance(s, Op) and s.attn_core], *on),
              "emb": stack(costs.emb_fwd + costs.emb_bwd, *on), "head": stack(costs.head_fwd + costs.head_bwd, *on)}
    params = stage_params(model, c, fw)
    n, e = len(c), DTYPE_BYTES[fw.dtype]
    send_recv = collectives(["p2p"], [expand(costs.p2p_bytes, inv, n)], [c.group("pp")], [2])
    grad_bytes = e * params.most
    dist = c.dist_opt > 0
    grad = [(mask, target, collectives([kind], [grad_bytes[mask]], [c.take(mask).group("dp_t2")]))
            for mask, kind, target in ((~dist, "all_reduce", "reduce"), (dist, "reduce_scatter", "reduce"),
                                       (dist, "all_gather", "gather")) if mask.any()]
    emb_sync = None
    if model.tied_embeddings:   # between the first and the last stage: 2 GPUs, 1 or 2 of them in one domain
        word = params.first - params.layer * (model.layers // c.pp) - (model.seq_len * model.hidden
                                                                      if model.learned_positions else 0)
        emb_sync = collectives(["all_reduce"], [e * word], [(np.full(n, 2), np.where(c.f_pp >= c.pp, 2, 1))],
                               extras=False)
    return Prepared(c, fw, inv, len(first_index), (model.layers // c.pp).astype(float), blocks, params,
                    memory_per_gpu(model, c, fw, costs, inv, params), send_recv, grad, emb_sync)


def merge(parts: list[Prepared]) -> Prepared | None:
    """Prepared candidates of several models (each prepared with ``reuse``) as one, to be priced by one
    :func:`evaluate_prepared` (candidates concatenated in order; usage counts summed), or None where they differ
    in their steps, framework or strategy. Every price is a function of its own candidate's columns, so each
    candidate's prices are those its own group gives. Only without calibrated GEMM or collective models (they
    answer for each group's op arrays)."""
    first = parts[0]
    if any(p.fw != first.fw or p.c.strategy != first.c.strategy or _structure(p) != _structure(first)
           for p in parts):
        return None
    if any(b.special and b.comms is None for p in parts for b in p.blocks.values()):
        return None   # steps timed one by one (SUMMA panels; not prepared with reuse) read their own arrays
    offsets = np.cumsum([0] + [p.keys for p in parts])
    grad = [(np.concatenate([p.grad[i][0] for p in parts]), target,
             concat_collectives([p.grad[i][2] for p in parts])) for i, (_, target, _) in enumerate(first.grad)]
    return Prepared(
        c=Candidates.concat([p.c for p in parts]),
        fw=first.fw, inv=np.concatenate([p.inv + o for p, o in zip(parts, offsets)]), keys=int(offsets[-1]),
        layers=np.concatenate([p.layers for p in parts]),
        blocks={k: concat_stacked([p.blocks[k] for p in parts], [p.keys for p in parts]) for k in first.blocks},
        params=StageParams(*(np.concatenate([getattr(p.params, f.name) for p in parts])
                             for f in dataclasses.fields(StageParams))),
        memory={k: np.concatenate([p.memory[k] for p in parts]) for k in first.memory},
        send_recv=concat_collectives([p.send_recv for p in parts]), grad=grad,
        emb_sync=None if first.emb_sync is None else concat_collectives([p.emb_sync for p in parts]),
        merged=True)


def _structure(p: Prepared) -> tuple:
    """What must match for prepared candidates to merge: each block's steps (names, kinds) and whether its
    collectives are stacked, the data-parallel collectives, the tied-embedding all-reduce."""
    blocks = tuple((k, tuple((s.name, s.kind) for s in b.steps), b.comms is not None, b.gemm_at)
                   for k, b in p.blocks.items())
    return blocks, tuple((c.kinds[0], target) for _, target, c in p.grad), p.emb_sync is None


def evaluate(model: Transformer, system: System, c: Candidates, fw: Framework,
             calibration: object | None = None) -> Evaluation:
    """Evaluate candidates of one strategy (see module docstring)."""
    return evaluate_prepared(prepare(model, c, fw), system, calibration)


def evaluate_prepared(prep: Prepared, system: System, calibration: object | None = None) -> Evaluation:
    """:func:`evaluate` of prepared candidates (``memory`` is the prepared dict, shared between calls)."""
    c, fw, inv, blocks, layers = prep.c, prep.fw, prep.inv, prep.blocks, prep.layers
    timer = Timer(system, fw, calibration)
    if prep.merged and (timer.gemm_model is not None or timer.comm_model is not None):
        raise ValueError("merged prepared candidates are priced without calibrated GEMM or collective models")
    n = len(c)

    fwd = timer.block(blocks["fwd"], c, inv)
    bwd = timer.block(blocks["bwd"], c, inv)
    selective = timer.block(blocks["selective"], c, inv)
    recompute = pick(c.recompute == 2, fwd, pick(c.recompute == 1, selective, {}))
    body = scale(add(fwd, bwd, recompute), layers)
    # fitted host costs (planner/fitting.py): layers/pp × layer_fixed + microbatch_fixed per micro-batch and stage
    fixed = (layers * float(getattr(calibration, "layer_fixed_s", 0.0))
             + float(getattr(calibration, "microbatch_fixed_s", 0.0)))
    body = add(body, {"overhead": fixed})
    host_overlap = bool(getattr(calibration, "host_overlap", False))
    sharpness = float(getattr(calibration, "overlap_sharpness", 0.0)) or None
    emb = timer.block(blocks["emb"], c, inv)
    head = timer.block(blocks["head"], c, inv)
    p2p = timer.collectives_time(prep.send_recv)[0]
    if fw.overlap_p2p:
        p2p = np.maximum(0.0, p2p - total(body))
    parts = _pipeline(body, emb, head, {"pp_comm": p2p}, c, host_overlap, sharpness)

    params = prep.params
    parts["dp_comm"] = _data_parallel(timer, prep, total(fwd), total(bwd), layers)
    parts["emb_sync"] = _embedding_sync(timer, prep)
    shard = params.most / optimizer_shards(c)
    parts["optimizer"] = (shard * OPTIMIZER_STEP_BYTES / timer.hbm_rate
                          + OPTIMIZER_KERNELS * system.op_overhead_us * 1e-6)
    parts = {k: np.broadcast_to(parts.get(k, 0.0), (n,)).astype(float) for k in BREAKDOWN_KEYS}
    memory = prep.memory
    fits = memory["total"] <= system.hbm_bytes * system.efficiency["hbm_usable"]
    return Evaluation(total(parts), parts, memory, fits, timer.usage)


def _pipeline(body: Parts, emb: Parts, head: Parts, p2p: Parts, c: Candidates, host_overlap: bool = False,
              sharpness: float | None = None) -> Parts:
    """1F1B over pp stages and nmb micro-batches; the slowest stage's parts × nmb, plus 'bubble'.

    ``host_overlap``: the host (kernel launches and fixed costs, 'overhead') runs ahead of the GPU, so a stage's
    micro-batch takes ``max(device, host)``: 'overhead' keeps only ``max(0, host − device)``; with ``sharpness`` p
    the soft maximum ``(device^p + host^p)^(1/p)`` (see :func:`_host_exposed`)."""
    single = c.pp == 1
    first = add(body, emb, p2p, scale(head, single.astype(float)))
    last = add(body, head, p2p)
    middle = add(body, p2p)
    if host_overlap:
        first, last, middle = (_host_exposed(p, sharpness) for p in (first, last, middle))
    t_first, t_last, t_middle = total(first), total(last), total(middle)
    t_max = np.maximum.reduce([t_first, np.where(single, 0.0, t_last), np.where(c.pp > 2, t_middle, 0.0)])
    t_sum = np.where(single, t_first, t_first + t_last + np.maximum(c.pp - 2, 0) * t_middle)
    critical = pick(t_first >= t_max, first, pick(~single & (t_last >= t_max), last, middle))
    out = scale(critical, c.nmb.astype(float))
    out["bubble"] = t_sum - t_max
    return out


def _host_exposed(parts: Parts, sharpness: float | None = None) -> Parts:
    """Parts with 'overhead' (host time) reduced to what the device time does not hide: max(0, host − device).

    With ``sharpness`` p: ``(device^p + host^p)^(1/p) − device``. A micro-batch alternates stretches where the GPU
    waits for the host (small kernels, collectives that synchronise the ranks) with stretches where the host waits
    for the GPU, so the sum of per-stretch maxima exceeds the maximum of the sums most where host and device times
    are equal; p → ∞ is the plain maximum, p = 1 no overlap at all."""
    host = np.asarray(parts.get("overhead", 0.0), dtype=float)
    device = np.asarray(total(parts), dtype=float) - host
    if sharpness is None:
        return {**parts, "overhead": np.maximum(0.0, host - device)}
    big = np.maximum(np.maximum(device, host), 1e-12)
    soft = big * ((device / big) ** sharpness + (host / big) ** sharpness) ** (1.0 / sharpness)
    return {**parts, "overhead": np.maximum(0.0, soft - device)}


def _data_parallel(timer: Timer, prep: Prepared, layer_fwd: np.ndarray, layer_bwd: np.ndarray, layers: np.ndarray
                   ) -> np.ndarray:
    """Exposed seconds of the gradient all-reduce (or reduce-scatter + parameter all-gather)."""
    def exposed(seconds: np.ndarray, overlap_per_layer: np.ndarray) -> np.ndarray:
        if not prep.fw.overlap_dp:
            return seconds
        return np.maximum(seconds / layers, seconds - (layers - 1) * overlap_per_layer)

    reduce, gather = np.zeros(len(prep.c)), np.zeros(len(prep.c))
    for mask, target, comm in prep.grad:   # all-reduce, reduce-scatter, all-gather: the order usage is counted in
        (reduce if target == "reduce" else gather)[mask] = timer.collectives_time(comm)[0]
    return exposed(reduce, layer_bwd) + exposed(gather, layer_fwd)


def _embedding_sync(timer: Timer, prep: Prepared) -> np.ndarray:
    """All-reduce of the tied word-embedding gradient between the first and the last stage (pp > 1)."""
    if prep.emb_sync is None:
        return np.zeros(len(prep.c))
    time = timer.collectives_time(prep.emb_sync)[0]
    return np.where(prep.c.pp > 1, time, 0.0)
