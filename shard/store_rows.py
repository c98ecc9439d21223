"""What a sharding study writes: per plan a derived trace set row (source 'derived', no trace files: the graph was
derived in memory; its parent the recorded trace set) and its prediction with the exact model and overhead versions used; then the study and its plans
(shard_studies, shard_plans). Everything is written after the work is done, under the study's 'shard' run, so
nothing of an interrupted or failed study counts (the views read completed runs only)."""
from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any, Sequence

from pmdb.store import Store
from shard.derive import DerivedPlan
from shard.plans import ShardTask
from shard.runs import Measured
from simulator.store_rows import Prediction, store_derived_trace_set, store_prediction


def _none(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def store_plan_prediction(store: Store, run_id: str, task: ShardTask, derived: DerivedPlan, pred: Prediction,
                          source_trace_set: int, measured: Measured | None = None) -> int:
    """The derived trace set and its prediction; returns the prediction id.

    The derived set names its parent (the recorded source) and its plan (``derivation``). With ground truth
    (``--validate``) the prediction is judged against the plan's pooled median, its workload run the last one, and
    the derived set belongs to the plan's workload, so the end-to-end error views and the report list the plan;
    without, it belongs to its parent's workload."""
    workload_id = store.scalar("SELECT workload_id FROM trace_sets WHERE trace_set_id = ?", [source_trace_set])
    if measured is not None and measured.runs and _none(measured.measured_us) is not None:
        pred.workload_run_id, pred.measured_us = measured.runs[-1], float(measured.measured_us)
        workload_id = store.scalar("SELECT workload_id FROM workload_runs WHERE run_id = ?", [measured.runs[-1]])
    pred.trace_set_id = store_derived_trace_set(
        store, run_id, parent=source_trace_set, platform=pred.source_platform, world_size=task.world_size,
        label=f"{task.config.name} {derived.plan.sharder} (derived from trace set {source_trace_set})",
        workload_id=None if workload_id is None else int(workload_id),
        derivation={"sharder": derived.plan.sharder, "plan": list(derived.plan.ranks)})
    return store_prediction(store, run_id, pred)


def write_study(store: Store, study: dict[str, Any], plans: Sequence[dict[str, Any]]) -> int:
    """Insert the study row and its plan rows; returns the study id."""
    study_id = int(store.insert_one("shard_studies", study, returning="study_id"))
    store.insert("shard_plans", [dict(p, study_id=study_id) for p in plans])
    return study_id


def plan_row(derived: DerivedPlan, pred: Prediction, prediction_id: int, position: int, predict_s: float,
             measured: Measured | None) -> dict[str, Any]:
    """One shard_plans row (without the study id)."""
    row = {"sharder": derived.plan.sharder, "plan": list(derived.plan.ranks), "position": position,
           "loads": [asdict(r) for r in derived.ranks], "predicted_us": float(pred.predicted_us),
           "prediction_id": prediction_id, "predict_s": float(predict_s), "workload_run_id": None,
           "measured_us": None, "measured_runs": None, "measured_spread": None}
    if measured is not None and measured.runs:
        row.update(workload_run_id=measured.runs[-1], measured_us=_none(measured.measured_us),
                   measured_runs=list(measured.runs), measured_spread=_none(measured.spread))
    return row
