"""One sharding study: build the plans, get a source trace (an existing one of the same structure, or a short
capture), derive and predict every plan, rank them, optionally run them all for ground truth, store the study.

Success (the paper's Table IV criterion): the plan predicted fastest is the measured fastest, or its measured time
is within 10% of the fastest one's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pandas as pd

from pmdb.store import Store
from shard import store_rows
from shard.derive import DerivedPlan, derive, structure_key
from shard.plans import Plan, ShardTask, build_plans
from shard.predict import PlanPredictor
from shard.runs import Measured, RunSettings, capture, ground_truth
from shard.source import Source, find_source
from shard.tables import table_stats
from pmdb.traces.from_store import load_graphs
from simulator.store_rows import Prediction

SUCCESS_MARGIN = 0.10


@dataclass(frozen=True)
class StudySettings:
    """What to compare and how: sharders and plan files, the model versions, ground truth or not."""

    sharders: tuple[str, ...]
    plan_files: tuple[Path, ...] = ()
    models: str = "champion"
    cache_state: str | None = None
    overhead_version: int | None = None
    validate: bool = False
    run: RunSettings = field(default_factory=RunSettings)
    series: str | None = None
    stats_batches: int = 3        # input batches the table statistics are averaged over


@dataclass
class PlanResult:
    """A plan's derived graph, prediction (µs), prediction wall time (s) and ground truth."""

    derived: DerivedPlan
    prediction: Prediction
    predict_s: float
    measured: Measured | None = None

    @property
    def sharder(self) -> str:
        return self.derived.plan.sharder


@dataclass
class StudyResult:
    """The ranked plans and the study's verdict."""

    study_id: int
    plans: list[PlanResult]
    trace_origin: str
    capture_s: float | None
    predict_s: float
    fastest: str | None = None
    chosen_slowdown: float | None = None
    success: bool | None = None
    validate_s: float | None = None

    @property
    def chosen(self) -> str:
        return self.plans[0].sharder

    def table(self) -> pd.DataFrame:
        """One row per plan, predicted fastest first (ms, %, s)."""
        rows = []
        for position, p in enumerate(self.plans, 1):
            m = p.measured
            measured = m.measured_us if m is not None and m.runs else None
            rows.append({"position": position, "sharder": p.sharder,
                         "predicted_ms": round(p.prediction.predicted_us / 1e3, 3),
                         "measured_ms": None if measured is None else round(measured / 1e3, 3),
                         "error_pct": None if measured is None else
                         round(100 * (p.prediction.predicted_us - measured) / measured, 2),
                         "spread_pct": None if measured is None else round(100 * m.spread, 1),
                         "predict_s": round(p.predict_s, 3),
                         "max_rank_lookups": max(r.indices for r in p.derived.ranks)})
        return pd.DataFrame(rows)


def judge(predicted: dict[str, float], measured: dict[str, float],
          margin: float = SUCCESS_MARGIN) -> tuple[str, str, float, bool]:
    """(chosen, fastest, slowdown of the chosen one, success) from predicted and measured µs per sharder."""
    chosen = min(predicted, key=lambda s: (predicted[s], s))
    fastest = min(measured, key=lambda s: (measured[s], s))
    slowdown = measured[chosen] / measured[fastest] - 1.0
    return chosen, fastest, slowdown, bool(slowdown <= margin)


def _groups(task: ShardTask, plans: list[Plan]) -> dict[tuple, list[Plan]]:
    out: dict[tuple, list[Plan]] = {}
    for plan in plans:
        out.setdefault(structure_key(task, plan.ranks), []).append(plan)
    return out


def plan_predictor(store: Store, platform: str, settings: StudySettings, world_size: int) -> PlanPredictor:
    """The session a study of ``settings`` at ``world_size`` predicts its plans with (refuses, with one line, a
    platform without the models a placement changes)."""
    return PlanPredictor(store, platform, world_size, models=settings.models, cache_state=settings.cache_state,
                         overhead_version=settings.overhead_version, threads=settings.run.threads)


def run_study(store: Store, platform: str, task: ShardTask, settings: StudySettings, run_id: str,
              progress: Callable[[str], None] | None = None, predictor: PlanPredictor | None = None) -> StudyResult:
    """Run one study under the 'shard' run ``run_id`` and store it; the ranked plans and verdict. ``predictor``:
    the study's session when the caller built it to check the request (:func:`plan_predictor`)."""
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    plans = build_plans(task, settings.sharders, settings.plan_files, settings.run.seed)
    predictor = predictor or plan_predictor(store, platform, settings, task.world_size)
    first = settings.run.warmup
    stats = table_stats(task, settings.run.seed, range(first, first + settings.stats_batches))
    args = {"shard_run": run_id, "task": task.task_id}
    origins, sources, results, capture_s = [], [], [], None
    for key, members in _groups(task, plans).items():
        source = find_source(store, task, key, platform)
        if source is None:
            say(f"no recorded trace of this structure: capturing one iteration of {members[0].sharder}")
            trace_set, seconds = capture(store, platform, task, members[0], settings.run, args)
            capture_s = (capture_s or 0.0) + seconds
            source = Source(trace_set, platform, members[0].ranks)
            origins.append(f"captured:{trace_set}")
        else:
            origins.append(f"derived-from:{source.trace_set_id}")
        sources.append(source)
        graph = load_graphs(store, source.trace_set_id, pick="best", detail=True, reuse=predictor.session.reuse)[0]
        for plan in members:
            begin = time.perf_counter()
            derived = derive(graph, source.ranks, task, plan, stats)
            prediction = predictor.predict(derived, source.platform)
            results.append(PlanResult(derived, prediction, time.perf_counter() - begin))
            say(f"{plan.sharder}: predicted {prediction.predicted_us / 1e3:.3f} ms")
    predict_s = time.perf_counter() - started - (capture_s or 0.0)
    results.sort(key=lambda r: (r.prediction.predicted_us, r.sharder))
    result = StudyResult(-1, results, ";".join(origins), capture_s, predict_s)
    if settings.validate:
        measured, result.validate_s = ground_truth(store, platform, task, plans, settings.run, args, say)
        for r in results:
            r.measured = measured[r.sharder]
        _, result.fastest, result.chosen_slowdown, result.success = judge(
            {r.sharder: r.prediction.predicted_us for r in results}, {s: m.measured_us for s, m in measured.items()})
    result.study_id = _store(store, run_id, platform, task, settings, result, sources[0].trace_set_id)
    return result


def _store(store: Store, run_id: str, platform: str, task: ShardTask, settings: StudySettings,
           result: StudyResult, source_trace_set: int) -> int:
    rows = []
    for position, r in enumerate(result.plans, 1):
        prediction_id = store_rows.store_plan_prediction(store, run_id, task, r.derived, r.prediction,
                                                         source_trace_set, r.measured)
        rows.append(store_rows.plan_row(r.derived, r.prediction, prediction_id, position, r.predict_s, r.measured))
    study: dict[str, Any] = {
        "run_id": run_id, "task_id": task.task_id, "platform": platform, "world_size": task.world_size,
        "batch_size": task.batch_size, "config": task.config.to_json(), "seed": settings.run.seed,
        "series": settings.series, "trace_origin": result.trace_origin, "source_trace_set_id": source_trace_set,
        "capture_s": result.capture_s, "predict_s": result.predict_s, "chosen": result.chosen,
        "fastest": result.fastest, "chosen_slowdown": result.chosen_slowdown, "success": result.success,
        "validate_s": result.validate_s}
    return store_rows.write_study(store, study, rows)
