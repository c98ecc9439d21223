"""Predict a trace set's per-iteration time (model or replay mode), judge it against its ground truth and store
it with the exact model versions and overhead version used. Times µs."""
from __future__ import annotations

import contextlib
import gc
import statistics
import sys
import time
from typing import Any, Iterator

import pandas as pd
from tqdm import tqdm

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import TraceGraph
from pmdb.traces.set_rows import complete_iterations, trace_set_info, untimed_ranks
from simulator import semantics as sem_mod
from simulator.embedding_stats import EmbeddingStats
from simulator.engine import SimResult, simulate, steady_period
from simulator.model_set import BLEND, Overheads, parse_spec
from simulator.store_rows import Prediction, ground_truth, store_prediction, trace_set_for_run
from simulator.replay import replay_programs
from simulator.session import PredictionSession
from simulator.threads import run_threads, thread_mismatch

MODES = ("model", "replay")


def replay_iterations(store: Store, trace_set_id: int, semantics: Semantics) -> list[tuple[TraceGraph, float, SimResult]]:
    """Every complete iteration of a trace set replayed: (its graph, steady-state time in µs, the single
    iteration's result), in trace order."""
    runs = []
    engine = sem_mod.get(semantics)
    for graph in tqdm(load_graphs(store, trace_set_id), desc="replaying iterations", unit="it", disable=None,
                      leave=False):
        programs = replay_programs(graph, semantics)
        single = simulate(programs, engine)
        runs.append((graph, steady_period(programs, engine, single), single))
    return runs


def _replay(store: Store, trace_set_id: int, semantics: Semantics) -> tuple[SimResult, float, int]:
    """Every complete iteration replayed; the median one (by steady-state time) represents them."""
    runs = [(period, single) for _, period, single in replay_iterations(store, trace_set_id, semantics)]
    runs.sort(key=lambda r: r[0])
    median = statistics.median(r[0] for r in runs)
    return runs[(len(runs) - 1) // 2][1], median, len(runs)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector: a prediction allocates some 10^5 short-lived containers (rows, ops),
    and each collection they trigger walks every long-lived object of the process (torch, scikit-learn), which cost
    more than the prediction itself. Reference counting still frees everything; the collector resumes after."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def predict_trace_set(store: Store, trace_set_id: int, *, mode: str = "model", models: str = "champion",
                      target_platform: str | None = None, cache_state: str | None = None,
                      workload_run_id: str | None = None, overhead_version: int | None = None,
                      overheads_from: str | None = None) -> Prediction:
    """Simulate a stored trace set; nothing is written (see :func:`predict_and_store`). In model mode, kernel models
    fitted at another thread count than the ground-truth workload run's give one warning line on stderr (and
    ``Prediction.warnings``)."""
    with _collector_paused():
        return _predict(store, trace_set_id, mode=mode, models=models, target_platform=target_platform,
                        cache_state=cache_state, workload_run_id=workload_run_id, overhead_version=overhead_version,
                        overheads_from=overheads_from)


def _predict(store: Store, trace_set_id: int, *, mode: str, models: str, target_platform: str | None,
             cache_state: str | None, workload_run_id: str | None, overhead_version: int | None,
             overheads_from: str | None = None) -> Prediction:
    if mode not in MODES:
        raise PmdbError(f"bad --mode {mode!r}: use model or replay")
    started = time.perf_counter()
    info = trace_set_info(store, trace_set_id)
    source = str(info["platform"])
    target = target_platform or source
    if mode == "replay" and target != source:
        raise PmdbError("replay mode takes every time from the trace itself: it has no target platform "
                        "(use --mode model with --target-platform)")
    run_id, measured = ground_truth(store, trace_set_id, target, mode, workload_run_id)
    unmarked = unmarked_note(store, trace_set_id)
    if unmarked:
        print(f"pmdb: warning: {unmarked}", file=sys.stderr)
    if mode == "replay":
        untimed = untimed_ranks(store, trace_set_id)
        if untimed:
            raise PmdbError(f"trace set {trace_set_id} has no times on rank(s) {', '.join(map(str, untimed))} "
                            f"(an execution trace alone): replay takes every time from a Kineto trace; predict it "
                            f"in model mode instead")
        result, predicted, iterations = _replay(store, trace_set_id, platforms.load(store, target).semantics)
        return Prediction(trace_set_id=int(trace_set_id), mode=mode, source_platform=source, target_platform=target,
                          result=result, predicted_us=predicted, iterations=iterations, measured_us=measured,
                          workload_run_id=run_id, elapsed_s=time.perf_counter() - started)
    session = PredictionSession(store, target, models=models, cache_state=cache_state,
                                overhead_version=overhead_version, overheads_from=overheads_from)
    workload_id = None if pd.isna(info.get("workload_id")) else int(info["workload_id"])
    graph = load_graphs(store, trace_set_id, pick="best", detail=session.detail)[0]
    pred = session.prediction(graph, EmbeddingStats.from_store(store, workload_id), source_platform=source,
                              trace_set_id=trace_set_id, threads=run_threads(store, run_id), measured_us=measured,
                              workload_run_id=run_id)
    pred.warnings = [n for n in [thread_mismatch(store, run_id, [(m.name, m.version) for m in pred.models])] if n]
    pred.defaults = [n for n in [session.missing_models(), session.missing_overheads()] if n]
    for note in pred.defaults:
        print(f"pmdb: note: {note}", file=sys.stderr)
    if not pred.predicted_us > 0:
        raise PmdbError(f"trace set {trace_set_id} predicts {pred.predicted_us:.1f} µs on {target}: nothing in it was "
                        f"priced (no times in the trace and no fitted models of {target}); fit models with "
                        f"`pmdb fit --platform {target}` or import a trace with times")
    for note in pred.warnings:
        print(f"pmdb: warning: {note}", file=sys.stderr)
    pred.elapsed_s = time.perf_counter() - started
    return pred


def unmarked_note(store: Store, trace_set_id: int) -> str | None:
    """One line when no rank of the trace set marks an iteration (no ``ProfilerStep#n``): the whole trace is then
    predicted as one iteration, and its 'measured' time is the whole trace's."""
    if any(complete_iterations(store, trace_set_id).values()):
        return None
    return (f"trace set {trace_set_id} marks no iterations (no ProfilerStep#n annotation): the whole trace is "
            f"predicted as one iteration")


def predict_and_store(store: Store, run_id: str, trace_set_id: int | None = None, workload_run_id: str | None = None,
                      **options: Any) -> tuple[int, Prediction]:
    """Predict a trace set (or the trace set of a workload run) and store it under run ``run_id``."""
    if (trace_set_id is None) == (workload_run_id is None):
        raise PmdbError("give a workload run id or --trace-set ID (exactly one)")
    if workload_run_id is not None:
        trace_set_id = trace_set_for_run(store, workload_run_id)
    pred = predict_trace_set(store, int(trace_set_id), workload_run_id=workload_run_id, **options)
    return store_prediction(store, run_id, pred), pred


def pending_runs(store: Store, platform: str, models: str = "champion", cache_state: str | None = None) -> list[str]:
    """Completed workload runs of ``platform`` with a recorded (not derived) trace set and no model-mode prediction
    made with versions that ``models`` still selects and the latest overhead version."""
    from fitters.load import select_models

    alias, versions = parse_spec(models)
    state = None if cache_state == BLEND else cache_state
    current = {(r.name, int(r.version)) for r in select_models(store, platform, alias or "champion",
                                                                  versions=versions, cache_state=state)}
    latest = Overheads.latest(store, platform).version
    runs = store.query("SELECT w.run_id FROM v_workload_runs w WHERE w.platform = ? AND EXISTS "
                       "(SELECT 1 FROM v_trace_sets t WHERE t.workload_id = w.workload_id AND t.source <> 'derived') "
                       "ORDER BY w.finished_at",
                       [platform])["run_id"].tolist()
    used = store.query("SELECT p.prediction_id, p.workload_run_id, p.overhead_version, m.name, m.version "
                       "FROM v_predictions p LEFT JOIN prediction_models m USING (prediction_id) "
                       "WHERE p.mode = 'model' AND p.target_platform = ? AND p.selection_spec = ? "
                       "AND p.selection_cache_state = ?",
                       [platform, models, cache_state or "default"])  # a blend is not the cold prediction
    fresh = set()
    for (pid, run), group in used.groupby(["prediction_id", "workload_run_id"], dropna=False):
        versions = {(n, int(v)) for n, v in zip(group["name"], group["version"]) if not pd.isna(n)}
        same_overheads = group["overhead_version"].iloc[0] == latest or (
            pd.isna(group["overhead_version"].iloc[0]) and latest is None)
        if versions and versions <= current and same_overheads:
            fresh.add(run)
    return [r for r in runs if r not in fresh]
