"""``pmdb predict --what-if``: predict a configuration that was not run from one recorded trace set.

The recorded iteration's graphs are transformed (:mod:`simulator.whatif`: batch size, data-parallel world size; a
sharding plan through a hook the sharding layer supplies, :mod:`shard.reshard`) and predicted by a
:class:`~simulator.session.PredictionSession` on the target platform. Each derived configuration is stored as a
trace set with ``source = 'derived'`` (no trace files), its parent and the transformation (``derivation``), and
its prediction. When the derived configuration itself was run here (the same workload config at that batch, world
size and plan, with a measured time on the target), the prediction is judged against that run and the derived set
belongs to its workload; otherwise to its parent's. Times µs.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable

import pandas as pd

from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import TraceGraph
from pmdb.traces.recorded import recorded_threads
from pmdb.traces.set_rows import trace_set_info
from simulator.embedding_stats import EmbeddingStats
from simulator.request import PredictionRequest
from simulator.session import PredictionSession
from simulator.store_rows import Prediction, store_derived_trace_set, store_prediction, trace_set_for_run
from simulator.threads import run_threads
from simulator.whatif import resize_world, scale_batch, scale_zero_shares

# (graph at the derived batch, its embedding statistics, that batch) -> (graph under the plan, statistics, what it did)
Reshard = Callable[[TraceGraph, EmbeddingStats, int], tuple[TraceGraph, EmbeddingStats, dict[str, Any]]]


@dataclass(frozen=True)
class WhatIf:
    """The configuration asked for: global batch size, world size (None: as recorded), and the recorded batch of
    a trace set that has no workload row (an imported trace)."""

    batch_size: int | None = None
    world_size: int | None = None
    recorded_batch: int | None = None


@dataclass(frozen=True)
class SourceSet:
    """A recorded trace set and the workload it ran (None fields: an imported trace without one)."""

    trace_set_id: int
    platform: str
    label: str
    world_size: int
    workload_id: int | None = None
    family: str | None = None
    name: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    batch_size: int | None = None
    sharder: str | None = None
    sharding: tuple[int, ...] | None = None
    workload_run_id: str | None = None     # its latest completed run on the recording platform (threads per rank)
    threads: int | None = None             # intra-op threads per rank it ran with: that run's, else the set's


@dataclass
class Derived:
    """A derived configuration, ready to predict."""

    source: SourceSet
    graph: TraceGraph
    embedding: EmbeddingStats
    batch_size: int | None
    world_size: int
    sharder: str | None
    plan: tuple[int, ...] | None
    derivation: dict[str, Any]
    notes: list[str] = field(default_factory=list)


@dataclass
class WhatIfResult:
    """A derived configuration's stored trace set and prediction."""

    derived: Derived
    trace_set_id: int
    prediction_id: int
    prediction: Prediction


def _none(value: Any) -> Any:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA else value


def source_set(store: Store, trace_set_id: int) -> SourceSet:
    """The recorded trace set (never a derived one), its workload and the intra-op threads it ran with."""
    info = trace_set_info(store, trace_set_id)
    if info["source"] == "derived":
        parent = _none(info.get("parent_trace_set_id"))
        raise PmdbError(f"trace set {trace_set_id} is itself derived{f' from trace set {int(parent)}' if parent else ''}"
                        f" (no traces): give the recorded trace set it came from")
    base = dict(trace_set_id=int(trace_set_id), platform=str(info["platform"]),
                label=str(_none(info.get("label")) or f"trace set {trace_set_id}"), world_size=int(info["world_size"]))
    workload_id = _none(info.get("workload_id"))
    if workload_id is None:
        return SourceSet(**base, threads=recorded_threads(store, int(trace_set_id)))
    row = store.query("SELECT family, name, config, batch_size, sharder, sharding FROM workloads "
                      "WHERE workload_id = ?", [int(workload_id)]).iloc[0]
    run = store.scalar("SELECT run_id FROM v_workload_runs WHERE workload_id = ? AND platform = ? "
                       "ORDER BY finished_at DESC LIMIT 1", [int(workload_id), base["platform"]])
    sharding = _none(row["sharding"])
    return SourceSet(**base, workload_id=int(workload_id), family=str(row["family"]), name=str(row["name"]),
                     config=json.loads(row["config"]) if isinstance(row["config"], str) else dict(row["config"]),
                     batch_size=int(row["batch_size"]), sharder=_none(row["sharder"]),
                     sharding=None if sharding is None else tuple(json.loads(sharding) if isinstance(sharding, str)
                                                                  else sharding),
                     workload_run_id=run,
                     threads=run_threads(store, run) or recorded_threads(store, int(trace_set_id)))


def request_source(store: Store, request: PredictionRequest) -> SourceSet:
    """The recorded trace set a what-if request derives from: its ``--trace-set``, else its workload run's."""
    return source_set(store, int(request.trace_set_id if request.trace_set_id is not None
                                 else trace_set_for_run(store, request.workload_run_id)))


@dataclass(frozen=True)
class WhatIfSetup:
    """A what-if's set-up, read once and shared by every configuration derived from it: the recorded source set,
    the session on the target, the source's graph (model mode's best iteration) and its embedding statistics."""

    source: SourceSet
    session: PredictionSession
    graph: TraceGraph
    embedding: EmbeddingStats

    @classmethod
    def load(cls, store: Store, source: SourceSet, session: PredictionSession, *, reuse: bool = True
             ) -> "WhatIfSetup":
        """Read the source's graph (every nested op where the session's platform needs them; reuse distances when
        its cache state needs them and ``reuse``) and its embedding statistics."""
        graph = load_graphs(store, source.trace_set_id, pick="best", detail=session.detail,
                            reuse=reuse and session.reuse)[0]
        return cls(source, session, graph, EmbeddingStats.from_store(store, source.workload_id))

    def fresh_embedding(self) -> EmbeddingStats:
        """The embedding statistics as a new object (its lookup counters start at zero, as when read)."""
        return EmbeddingStats(copy.deepcopy(self.embedding.per_rank))

    def recorded_us(self) -> float:
        """The recorded configuration predicted on the session's platform (µs; nothing stored)."""
        return self.session.prediction(self.graph, self.fresh_embedding(), source_platform=self.source.platform,
                                       threads=self.source.threads).predicted_us


def derive(store: Store, source: SourceSet, spec: WhatIf, *, detail: bool, reshard: Reshard | None = None,
           sharder: str | None = None, graph: TraceGraph | None = None,
           embedding: EmbeddingStats | None = None) -> Derived:
    """The configuration ``spec`` (and the plan of ``reshard``, labelled ``sharder``) derived from ``source``:
    batch first, then the plan, then the world size. ``--batch-size`` is the global batch at the derived world size;
    without it every rank keeps its recorded share (weak scaling). ``graph``: the source's graph, and ``embedding``
    its embedding statistics (a fresh object: its counters change), when loaded (:class:`WhatIfSetup`)."""
    if spec.batch_size is None and spec.world_size is None and reshard is None:
        raise PmdbError("--what-if needs a change: --batch-size N, --world-size N or --sharder NAME")
    graph = graph or load_graphs(store, source.trace_set_id, pick="best", detail=detail)[0]
    embedding = embedding if embedding is not None else EmbeddingStats.from_store(store, source.workload_id)
    old_world = len(graph.ranks)
    world = spec.world_size or old_world
    recorded = source.batch_size or spec.recorded_batch
    if spec.recorded_batch is not None and source.batch_size not in (None, spec.recorded_batch):
        raise PmdbError(f"trace set {source.trace_set_id} was recorded at batch {source.batch_size} (its workload "
                        f"row): --recorded-batch {spec.recorded_batch} contradicts it")
    if world != old_world and source.family == "dlrm":
        raise PmdbError(f"a DLRM spreads its tables over the ranks: its world size cannot change by copying a rank; "
                        f"record it at world size {world} (then --sharder derives its plans)")
    if spec.batch_size is not None and spec.batch_size % world:
        raise PmdbError(f"--batch-size {spec.batch_size} must be a multiple of the world size {world} (each rank "
                        f"runs an equal share)")
    derivation: dict[str, Any] = {}
    notes: list[str] = []
    batch = recorded if recorded is None else (spec.batch_size or recorded // old_world * world)
    if spec.batch_size is not None and recorded is None:
        raise PmdbError(f"trace set {source.trace_set_id} has no workload row, so its batch size is unknown: give "
                        f"it with --recorded-batch N")
    if batch is not None and batch != recorded:
        derivation["batch_size"] = [recorded, batch]
    if batch is not None and batch * old_world != recorded * world:     # the per-rank share changes
        graph, embedding, scaling = scale_batch(graph, recorded, batch * old_world // world, world=old_world,
                                                embedding=embedding)
        derivation.update(scaled_shapes=scaling.shapes, ambiguous_shapes=scaling.ambiguous)
        notes += [n for n in [scaling.note()] if n]
        if not scaling.shapes:
            notes.append(f"no shape of trace set {source.trace_set_id} carries its batch of {recorded}: the graph "
                         f"did not change")
    plan = source.sharding
    if reshard is not None:
        graph, embedding, did = reshard(graph, embedding, int(batch or 0))
        derivation.update(did)
        plan = tuple(did.get("plan", plan) or ())
    if world != old_world:
        graph, resized = resize_world(graph, world)
        embedding = EmbeddingStats({r: list(embedding.per_rank.get(0, [])) for r in range(world)}
                                   if embedding.per_rank else {})
        derivation["world_size"] = [old_world, world]
        derivation.update({k: v for k, v in (("inserted_all_reduce", resized.inserted),
                                              ("dropped_collectives", resized.dropped)) if v})
    if batch is not None and batch != recorded and scale_zero_shares(graph, batch / recorded):
        derivation["zero_shares_scaled"] = batch / recorded
    return Derived(source, graph, embedding, batch, world, sharder or source.sharder, plan, derivation, notes)


def own_run(store: Store, derived: Derived, target: str) -> tuple[int | None, str | None, float | None]:
    """(workload id, workload run id, measured µs) of the derived configuration when it was run here: the same
    family, name and config (batch aside) at its batch, world size and plan; the latest run measured on
    ``target``. Nones when it was not."""
    src = derived.source
    if src.workload_id is None or derived.batch_size is None:
        return None, None, None
    frame = store.query("SELECT workload_id, config, sharding FROM workloads WHERE family = ? AND name = ? "
                        "AND batch_size = ? AND world_size = ? ORDER BY workload_id DESC",
                        [src.family, src.name, int(derived.batch_size), int(derived.world_size)])
    strip = {k: v for k, v in src.config.items() if k != "batch_size"}
    for row in frame.itertuples(index=False):
        config = json.loads(row.config) if isinstance(row.config, str) else dict(row.config)
        sharding = _none(row.sharding)
        sharding = None if sharding is None else tuple(json.loads(sharding) if isinstance(sharding, str) else sharding)
        if {k: v for k, v in config.items() if k != "batch_size"} != strip or sharding != derived.plan:
            continue
        run = store.conn.execute("SELECT run_id, measured_us FROM v_workload_runs WHERE workload_id = ? AND "
                                 "platform = ? AND measured_us IS NOT NULL ORDER BY finished_at DESC LIMIT 1",
                                 [int(row.workload_id), target]).fetchone()
        return int(row.workload_id), (run[0] if run else None), (float(run[1]) if run else None)
    return None, None, None


def missing_collectives(session: PredictionSession, derived: Derived) -> list[str]:
    """Collectives of a derived graph whose world size changed that no model prices at the new world size (their
    recorded times belong to the recorded world size; an inserted one has none)."""
    if "world_size" not in derived.derivation:
        return []
    kinds = sorted({op.collective for rank in derived.graph.ranks for op in rank.ops if op.is_collective} - {None})
    return [k for k in kinds if k != "barrier" and session.models.collective(k, derived.world_size) is None]


def label(derived: Derived) -> str:
    """'<source> what-if: batch 8->16, world 1->2, sharder naive->size_greedy (from trace set N)'."""
    parts = [f"{key.replace('_size', '')} {old}->{new}" for key in ("batch_size", "world_size")
             if (pair := derived.derivation.get(key))
             for old, new in [pair]]
    if "sharder" in derived.derivation:
        parts.append(f"sharder {derived.source.sharder or '?'}->{derived.derivation['sharder']}")
    return f"{derived.source.label} what-if: {', '.join(parts)} (from trace set {derived.source.trace_set_id})"


def predict_derived(store: Store, run_id: str, derived: Derived, session: PredictionSession) -> WhatIfResult:
    """Predict a derived configuration on the session's platform and store it (derived trace set + prediction)."""
    missing = missing_collectives(session, derived)
    if missing:
        platform = session.platform.name
        raise PmdbError(f"no {', '.join(missing)} model at world size {derived.world_size} on {platform}: measure "
                        f"and fit one (`pmdb collect comms --ops {','.join(missing)} --world-size "
                        f"{derived.world_size}`, `pmdb fit --op {missing[0]}`)")
    src = derived.source
    workload_id, truth_run, measured = own_run(store, derived, session.platform.name)
    pred = session.prediction(derived.graph, derived.embedding, source_platform=src.platform,
                              threads=src.threads, measured_us=measured,
                              workload_run_id=truth_run if measured is not None else None)
    pred.defaults = [n for n in [session.missing_models(), session.missing_overheads()] if n]
    if not pred.predicted_us > 0:
        raise PmdbError(f"the derived configuration predicts {pred.predicted_us:.1f} µs on {session.platform.name}: "
                        f"nothing in it was priced; fit models with `pmdb fit --platform {session.platform.name}`")
    record = dict(derived.derivation)
    if session.platform.name != src.platform:
        record["target_platform"] = session.platform.name
    derived_id = store_derived_trace_set(store, run_id, parent=src.trace_set_id, platform=src.platform,
                                         world_size=derived.world_size, label=label(derived),
                                         workload_id=workload_id or src.workload_id, derivation=record)
    pred.trace_set_id = derived_id
    return WhatIfResult(derived, derived_id, store_prediction(store, run_id, pred), pred)
