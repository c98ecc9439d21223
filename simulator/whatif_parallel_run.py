"""``pmdb predict --what-if --data-parallel D --tensor-parallel T --pipeline-parallel P``: derive the per-stage
micro-batch programs of a parallel configuration from one recorded (shape-only) graph
(:mod:`simulator.whatif_parallel`), price each on the session's platform, run the 1F1B schedule, and store the
derived trace set (parent, derivation) with its prediction. Times µs, sizes bytes."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.graph import RankGraph, TraceGraph
from simulator import semantics as sem_mod
from simulator.embedding_stats import EmbeddingStats
from simulator.engine import RankResult, SimResult, simulate
from simulator.session import PredictionSession
from simulator.store_rows import ModelUse, Prediction, store_derived_trace_set, store_prediction
from simulator.timing import ModelTiming
from simulator.whatif import scale_batch
from simulator.whatif_parallel import (COMM_OP, CommPricer, LinkFigures, ModelDims, ParallelSpec, Schedule, check,
                                       chunk, forward_parameters, gradient_buckets, megatron_fusions, model_dims,
                                       one_f_one_b, pipeline_send_us, split_stages, tensor_parallel,
                                       tied_embedding_us)
from simulator.whatif_predict import SourceSet


@dataclass
class ParallelResult:
    """One parallel configuration predicted and stored."""

    spec: ParallelSpec
    dims: ModelDims
    batch: int
    micro_batch: int
    schedule: Schedule
    fw_us: list[float]
    bw_us: list[float]
    bw_last_us: list[float]
    send_us: float
    priced_by: dict[str, str]
    prediction: Prediction
    trace_set_id: int = -1
    prediction_id: int = -1
    notes: list[str] = field(default_factory=list)
    embedding_us: float = 0.0     # the tied embedding's gradient all-reduce after the pipeline (P > 1)


@dataclass
class _Chunks:
    fw: list[list[Any]]
    bw: list[list[Any]]
    bw_last: list[list[Any]]
    derivation: dict[str, Any]


def derive(graph: TraceGraph, recorded_batch: int, batch: int, spec: ParallelSpec,
           pricer: CommPricer) -> tuple[_Chunks, ModelDims, int]:
    """Per stage, the forward, backward and last (data-parallel) backward programs of one micro-batch."""
    dims = model_dims(graph)
    check(spec, dims, batch)
    micro = batch // (spec.dp * spec.micro_batches)
    rank0 = TraceGraph([graph.ranks[0]], graph.semantics, graph.source_platform)
    derivation: dict[str, Any] = {"parallel": {"data": spec.dp, "tensor": spec.tp, "pipeline": spec.pp,
                                               "micro_batches": spec.micro_batches},
                                  "batch_size": [recorded_batch, batch], "micro_batch": micro}
    if micro != recorded_batch:
        rank0, _, scaling = scale_batch(rank0, recorded_batch, micro, world=1)
        derivation["scaled_shapes"] = scaling.shapes
    if spec.tp > 1:
        rank0, cut = tensor_parallel(rank0, dims, spec.tp, micro, pricer, in_place=micro != recorded_batch)
        derivation["tensor_parallel_shapes_cut"] = cut
    ops = rank0.ranks[0].ops
    if spec.fused:
        ops, derivation["megatron_fusions_dropped"] = megatron_fusions(ops, dims, spec.tp)
    stages = split_stages(ops, dims, spec.pp)
    fw = [chunk(f) for f, _ in stages]
    bw = [chunk(b) for _, b in stages]
    bw_last, grad_bytes = [], 0.0
    for f, b in stages:
        if spec.dp > 1:
            last, size = gradient_buckets(b, forward_parameters(f), spec.dp, pricer)
            bw_last.append(last)
            grad_bytes += size
        else:
            bw_last.append(chunk(b))
    if spec.dp > 1:
        derivation["gradient_bytes_per_rank"] = grad_bytes
    return _Chunks(fw, bw, bw_last, derivation), dims, micro


def _price(session: PredictionSession, chunks: list[list[Any]], semantics: Any, threads: int | None) -> tuple[
        list[SimResult], ModelTiming]:
    """Each program simulated alone on the session's platform (one batched model call for all)."""
    graph = TraceGraph([RankGraph(i, ops) for i, ops in enumerate(chunks)], semantics)
    timing = ModelTiming(session.models, session.overheads, session.platform.semantics, EmbeddingStats(),
                         session.platform.cache_bytes, session.measured, threads)
    programs = timing.programs(graph)
    engine = sem_mod.get(session.platform.semantics)
    return [simulate([p], engine) for p in programs], timing


def _rank_results(schedule: Schedule, sims: list[SimResult], stages: int) -> SimResult:
    """Per stage, the schedule's end and busy time with the summed kernel times of its last micro-batch
    (``sims``: forward, backward, last backward programs, ``stages`` each)."""
    out = []
    for s in range(stages):
        parts = [sims[s].ranks[0], sims[2 * stages + s].ranks[0]]
        kernels = sum(r.compute_kernel_us for r in parts)
        comm = sum(r.comm_kernel_us for r in parts)
        out.append(RankResult(rank=s, predicted_us=schedule.stage_end_us[s], cpu_us=schedule.stage_end_us[s],
                              compute_front_us=schedule.stage_end_us[s], comm_front_us=schedule.stage_end_us[s],
                              compute_busy_us=schedule.stage_busy_us[s], comm_busy_us=comm,
                              device_active_us=schedule.stage_busy_us[s], comm_unoverlapped_us=0.0,
                              compute_kernel_us=kernels, comm_kernel_us=comm, baseline_us=max(kernels, comm),
                              ops=sum(r.ops for r in parts)))
    return SimResult(out)


def predict_parallel(store: Store, run_id: str, source: SourceSet, graph: TraceGraph, spec: ParallelSpec,
                     batch: int | None, session: PredictionSession, *, threads: int | None = None,
                     link: LinkFigures | None = None, recorded_batch: int | None = None) -> ParallelResult:
    """Derive, price, schedule and store one parallel configuration (global ``batch``, default the recorded)."""
    started = time.perf_counter()
    recorded = source.batch_size or recorded_batch
    if recorded is None:
        raise PmdbError(f"trace set {source.trace_set_id} has no workload row, so its batch size is unknown: give "
                        f"it with --recorded-batch N")
    if len(graph.ranks) != 1:
        raise PmdbError(f"trace set {source.trace_set_id} has {len(graph.ranks)} ranks: parallel what-ifs start "
                        f"from one GPU's graph")
    batch = batch or recorded
    pricer = CommPricer(session.models, link)
    chunks, dims, micro = derive(graph, recorded, batch, spec, pricer)
    p = spec.pp
    sims, timing = _price(session, chunks.fw + chunks.bw + chunks.bw_last, graph.semantics, threads)
    fw = [r.predicted_us for r in sims[:p]]
    bw = [r.predicted_us for r in sims[p:2 * p]]
    bw_last = [r.predicted_us for r in sims[2 * p:]]
    send = pipeline_send_us(pricer, dims, micro, spec.tp) if p > 1 else 0.0
    embedding = tied_embedding_us(pricer, dims, spec)
    schedule = one_f_one_b(fw, bw, bw_last, spec.micro_batches, send, embedding)
    counts = dict(timing.usage.models)
    for by in pricer.used.values():
        name, _, version = by.split(" ")[0].rpartition(":")
        if name and version.isdigit():
            counts[(name, int(version))] = counts.get((name, int(version)), 0) + 1
    used = [ModelUse(n, v, c) for (n, v), c in sorted(counts.items())]
    unmodelled = [r for r in timing.usage.unmodelled(float("nan"), timing.work_us)
                  if not str(r.get("op", r.get("name", ""))).startswith(COMM_OP)]
    phases = {"fw": sum(fw) + send * (p - 1), "bw": sum(bw_last) + send * (p - 1) + embedding} \
        if spec.micro_batches == 1 else {}
    pred = Prediction(trace_set_id=-1, mode="model", source_platform=source.platform,
                      target_platform=session.platform.name, result=_rank_results(schedule, sims, p),
                      predicted_us=schedule.step_us, models=used, overhead_version=session.overheads.version,
                      model_selection=session.models.selection, unmodelled=unmodelled, phases_us=phases,
                      elapsed_s=time.perf_counter() - started)
    pred.defaults = [n for n in [session.missing_models(), session.missing_overheads()] if n]
    if not pred.predicted_us > 0:
        raise PmdbError(f"the derived configuration predicts {pred.predicted_us:.1f} µs on {session.platform.name}: "
                        f"nothing in it was priced; fit models with `pmdb fit --platform {session.platform.name}`")
    record = dict(chunks.derivation, collectives=dict(pricer.used), stage_fw_us=fw, stage_bw_us=bw_last,
                  send_us=send, tied_embedding_all_reduce_us=embedding, bubble_share=schedule.bubble_share)
    if session.platform.name != source.platform:
        record["target_platform"] = session.platform.name
    label = (f"{source.label} what-if: {spec.tag()}, batch {batch} (from trace set {source.trace_set_id})")
    derived_id = store_derived_trace_set(store, run_id, parent=source.trace_set_id, platform=source.platform,
                                         world_size=spec.world, label=label, workload_id=source.workload_id,
                                         derivation=record)
    pred.trace_set_id = derived_id
    result = ParallelResult(spec, dims, batch, micro, schedule, fw, bw, bw_last, send, dict(pricer.used), pred,
                            derived_id, store_prediction(store, run_id, pred), embedding_us=embedding)
    if spec.tp > 1 and dims.vocab % (128 * spec.tp):
        result.notes.append(f"vocabulary {dims.vocab} padded as Megatron pads it (a multiple of {128 * spec.tp}) "
                            f"and split {spec.tp} ways")
    return result
