"""What ``pmdb predict --all`` predicts: every completed workload run of a platform with a recorded trace set, and
every imported trace set (a trace recorded elsewhere, often with no workload run at all), that has no current
model-mode prediction.

A prediction is current when it was made from a recorded (not derived) trace set with the same ``--models``,
cache state and ``--kernels`` (with 'measured': no op measurement of the platform newer than it), with versions
the selection still picks (none, when the platform has none: an imported GPU trace is predicted from its traced
times once, not at every ``--all``), the platform's latest overhead version, and the simulator rules in force
(:data:`simulator.semantics.RULES_VERSION`; a prediction made under other rules, or before they were recorded, is
made again).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from pmdb.store import Store
from simulator.measured_shapes import MEASURED, latest_measurement
from simulator.model_set import BLEND, Overheads, choose_collectives, collective_choice, parse_spec
from simulator.request import PredictionRequest
from simulator.semantics import RULES_VERSION


@dataclass(frozen=True)
class PendingTraceSet:
    """An imported trace set to predict on ``platform`` (the one it was recorded on, or the named target)."""

    trace_set_id: int
    platform: str


def _current_versions(store: Store, platform: str, models: str, cache_state: str | None) -> set[tuple[str, int]]:
    from fitters.load import select_models

    alias, versions = parse_spec(models)
    state = None if cache_state == BLEND else cache_state
    return {(r.name, int(r.version)) for r in choose_collectives(
        select_models(store, platform, alias or "champion", versions=versions, cache_state=state),
        collective_choice(models)[1])}


def _fresh(store: Store, platform: str, models: str, cache_state: str | None, key: str,
           kernels: str = MEASURED) -> set:
    """Values of ``key`` (workload_run_id or trace_set_id) of the current predictions for ``platform``."""
    current = _current_versions(store, platform, models, cache_state)
    latest = Overheads.latest(store, platform).version
    upto = latest_measurement(store, platform) if kernels == MEASURED else None
    used = store.query(f"SELECT p.prediction_id, p.{key} AS key, p.overhead_version, p.rules_version, m.name, "
                       "m.version FROM v_predictions p JOIN trace_sets t USING (trace_set_id) "
                       "LEFT JOIN prediction_models m USING (prediction_id) "
                       "WHERE p.mode = 'model' AND p.target_platform = ? AND p.selection_spec = ? "
                       "AND p.selection_cache_state = ? AND t.source <> 'derived' AND p.rules_version = ? "
                       "AND coalesce(p.selection_kernels, 'models') = ? "
                       "AND p.measurements_upto IS NOT DISTINCT FROM ?",   # newer measurements: predicted again
                       [platform, models, cache_state or "default", RULES_VERSION, kernels, upto])
    fresh = set()
    for (_, value), group in used.groupby(["prediction_id", "key"], dropna=False):
        versions = {(n, int(v)) for n, v in zip(group["name"], group["version"]) if not pd.isna(n)}
        overheads = group["overhead_version"].iloc[0]
        same_overheads = overheads == latest or (pd.isna(overheads) and latest is None)
        if (versions or not current) and versions <= current and same_overheads:   # none at all: none to miss
            fresh.add(value)
    return fresh


def pending_runs(store: Store, platform: str, models: str = "champion", cache_state: str | None = None,
                 kernels: str = MEASURED) -> list[str]:
    """Completed workload runs of ``platform`` with a recorded (not derived) trace set and no current prediction."""
    runs = store.query("SELECT w.run_id FROM v_workload_runs w WHERE w.platform = ? AND EXISTS "
                       "(SELECT 1 FROM v_trace_sets t WHERE t.workload_id = w.workload_id AND t.source <> 'derived') "
                       "ORDER BY w.finished_at", [platform])["run_id"].tolist()
    fresh = _fresh(store, platform, models, cache_state, "workload_run_id", kernels)
    return [r for r in runs if r not in fresh]


def pending_imports(store: Store, platform: str | None, models: str = "champion",
                    cache_state: str | None = None, runs_platform: str | None = None,
                    kernels: str = MEASURED) -> list[PendingTraceSet]:
    """Imported trace sets with no current prediction: on ``platform`` (the target named), or with None each on the
    platform it was recorded on. A set whose workload has a completed run on ``runs_platform`` is left out: the
    runs of that platform (:func:`pending_runs`) already predict it."""
    frame = store.query("SELECT t.trace_set_id, t.platform FROM v_trace_sets t WHERE t.source = 'imported' "
                        "AND (? IS NULL OR t.platform = ?) AND NOT EXISTS (SELECT 1 FROM v_workload_runs w "
                        "WHERE w.workload_id = t.workload_id AND w.platform = ?) "
                        "ORDER BY t.created_at, t.trace_set_id", [platform, platform, runs_platform])
    out, fresh = [], {}
    for ts, source in zip(frame["trace_set_id"], frame["platform"]):
        target = platform or str(source)
        if target not in fresh:
            fresh[target] = _fresh(store, target, models, cache_state, "trace_set_id", kernels)
        if int(ts) not in fresh[target]:
            out.append(PendingTraceSet(int(ts), target))
    return out


def pending_requests(store: Store, request: PredictionRequest, platform: str) -> list[PredictionRequest]:
    """What ``predict --all`` with ``request``'s options predicts, one request each: the pending workload runs of
    ``platform`` (:func:`pending_runs`), then the pending imported trace sets of the request's target, or of every
    platform each on its own (:func:`pending_imports`)."""
    runs = pending_runs(store, platform, request.models, request.cache_state, request.kernels)
    imports = pending_imports(store, request.target_platform, request.models, request.cache_state,
                              runs_platform=platform, kernels=request.kernels)
    return [replace(request, workload_run_id=r) for r in runs] + [
        replace(request, trace_set_id=p.trace_set_id, target_platform=p.platform) for p in imports]
