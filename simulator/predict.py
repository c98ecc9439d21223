"""Predict a trace set's per-iteration time (model or replay mode), judge it against its ground truth and store
it with the exact model versions and overhead version used. A request is resolved once
(:func:`simulator.request.resolve`: trace set, target, truth, threads, iterations, session) and predicted from that
record (:func:`predict`); :func:`predict_trace_set` and :func:`predict_and_store` do both. Times µs."""
from __future__ import annotations

import statistics
import time
from typing import Any

from tqdm import tqdm

from pmdb.errors import PmdbError
from pmdb.notes import say
from pmdb.platform import Semantics
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.gc_pause import collector_paused
from pmdb.traces.graph import TraceGraph
from pmdb.traces.set_rows import complete_iterations
from simulator import chrome_trace
from simulator import semantics as sem_mod
from simulator.embedding_stats import EmbeddingStats
from simulator.engine import SimResult, simulate, steady_period
from simulator.measured_shapes import MEASURED
from simulator.memory_fit import memory_warning
from simulator.compute_phase import compute_pace
from simulator.memory_phase import memory_pace
from simulator.pending import pending_runs  # noqa: F401  (pmdb predict --all; kept importable from here)
from simulator.replay import replay_programs
from simulator.session import PredictionSession
from simulator.request import PredictionRequest, ResolvedRequest, resolve
from simulator.store_rows import Prediction, store_prediction
from simulator.threads import model_threads, thread_mismatch


def replay_iterations(store: Store, trace_set_id: int, semantics: Semantics, *, info: dict[str, Any] | None = None,
                      marked: dict[int, list[int]] | None = None) -> list[tuple[TraceGraph, float, SimResult]]:
    """Every complete iteration of a trace set replayed: (its graph, steady-state time in µs, the single
    iteration's result), in trace order. ``info``/``marked``: the set's row and iterations, when already read."""
    runs = []
    engine = sem_mod.get(semantics)
    for graph in tqdm(load_graphs(store, trace_set_id, info=info, marked=marked), desc="replaying iterations",
                      unit="it", disable=None, leave=False):
        programs = replay_programs(graph, semantics)
        single = simulate(programs, engine)
        runs.append((graph, steady_period(programs, engine, single), single))
    return runs


def _replay(store: Store, resolved: ResolvedRequest) -> tuple[SimResult, float, int,
                                                              chrome_trace.SimulatedIteration | None]:
    """Every complete iteration replayed; the median one (by steady-state time) represents them (``timeline``:
    with that iteration recorded op by op)."""
    semantics = resolved.source_semantics   # replay runs on the platform the trace was recorded on
    runs = [(period, single, graph) for graph, period, single in
            replay_iterations(store, resolved.trace_set_id, semantics, info=resolved.trace_set,
                              marked=resolved.iterations)]
    runs.sort(key=lambda r: r[0])
    median = statistics.median(r[0] for r in runs)
    period, single, graph = runs[(len(runs) - 1) // 2]
    return single, median, len(runs), chrome_trace.replayed(graph, semantics) if resolved.request.timeline else None


def predict_trace_set(store: Store, trace_set_id: int, *, mode: str = "model", models: str = "champion",
                      target_platform: str | None = None, cache_state: str | None = None,
                      workload_run_id: str | None = None, overhead_version: int | None = None,
                      overheads_from: str | None = None, timeline: bool = False,
                      kernels: str = MEASURED) -> Prediction:
    """Resolve and simulate a stored trace set (:func:`predict`); nothing is written (see
    :func:`predict_and_store`). ``workload_run_id``: the workload run whose measured time is the truth."""
    request = PredictionRequest(int(trace_set_id), workload_run_id, mode, models, target_platform, cache_state,
                                overhead_version, overheads_from, kernels, timeline)
    return predict(store, resolve(store, request))


def predict(store: Store, resolved: ResolvedRequest) -> Prediction:
    """Simulate a resolved request's trace set; nothing is written. In model mode, kernel models fitted at another
    thread count than the ground-truth workload run's give one warning line on stderr (and
    ``Prediction.warnings``). With ``timeline`` asked for, the simulated iteration is recorded op by op
    (``Prediction.iteration``, exported by :mod:`simulator.chrome_trace`)."""
    with collector_paused():   # some 10^5 short-lived containers (rows, ops)
        return _predict(store, resolved)


def _predict(store: Store, resolved: ResolvedRequest) -> Prediction:
    started = time.perf_counter()
    trace_set_id, mode, truth = resolved.trace_set_id, resolved.mode, resolved.truth
    if truth.note:
        say("note", truth.note)
    unmarked = unmarked_note(store, trace_set_id, resolved.iterations)
    if unmarked:
        say("warning", unmarked)
    if mode == "replay":
        result, predicted, iterations, iteration = _replay(store, resolved)
        external = external_note(result, mode)
        if external:
            say("note", external)
        return Prediction(trace_set_id=trace_set_id, mode=mode, source_platform=resolved.source_platform,
                          target_platform=resolved.target_platform, result=result, predicted_us=predicted,
                          iterations=iterations, measured_us=truth.measured_us,
                          workload_run_id=truth.workload_run_id, elapsed_s=time.perf_counter() - started,
                          iteration=iteration)
    session, target = resolved.session, resolved.target_platform
    # the LLC the run found (a CPU run measured here; else the one the platform's op sweeps found)
    found = session.llc_found(store, truth.workload_run_id if resolved.source_platform == target else None)
    graph = load_graphs(store, trace_set_id, pick="best", detail=session.detail, reuse=session.reuse_with(found),
                        info=resolved.trace_set, marked=resolved.iterations)[0]
    pred = session.prediction(graph, EmbeddingStats.from_store(store, resolved.workload_id),
                              source_platform=resolved.source_platform, trace_set_id=trace_set_id,
                              threads=resolved.threads, measured_us=truth.measured_us,
                              workload_run_id=truth.workload_run_id, timeline=resolved.request.timeline,
                              llc_found=found)
    pred.llc_found = found   # session.llc_found gives one only where reuse pricing uses it
    if resolved.source_platform == target and session.platform.sync_host:   # a CPU truth measured here
        pred.memory_pace = memory_pace(store, truth.workload_run_id, target)
        pred.compute_pace = compute_pace(store, truth.workload_run_id, target)
    used = [(m.name, m.version) for m in pred.models]
    pred.warnings = [n for n in [thread_mismatch(store, truth.workload_run_id, used)
                                 if resolved.run_threads is not None
                                 else set_thread_mismatch(store, trace_set_id, used, resolved.threads)] if n]
    pred.defaults = [n for n in [session.missing_models(), session.missing_overheads(),
                                 found.sentence() if found is not None else None] if n]
    external = external_note(pred.result, mode)
    if external:
        pred.defaults.append(external)
    for note in pred.defaults:
        say("note", note)
    if not pred.predicted_us > 0:
        raise PmdbError(f"trace set {trace_set_id} predicts {pred.predicted_us:.1f} µs on {target}: nothing in it was "
                        f"priced (no times in the trace and no fitted models of {target}); fit models with "
                        f"`pmdb fit --platform {target}` or import a trace with times")
    fits = None if session.platform.sync_host else memory_warning(store, trace_set_id, target)
    if fits:
        pred.warnings.append(fits)
    if pred.self_priced:
        pred.warnings.append(f"{100 * pred.self_priced_share:.0f}% of the predicted work kept its traced time "
                             f"or rows mined from it (no model priced it): replay, not a model; left out of model "
                             f"error statistics")
    for note in pred.warnings:
        say("warning", note)
    pred.elapsed_s = time.perf_counter() - started
    return pred


def external_note(result: SimResult, mode: str) -> str | None:
    """One line naming the host waits for work outside the trace (other ranks, other threads) in the simulated
    iteration and how they were priced; None when there were none."""
    waits = [r for r in result.ranks if r.external_waits]
    if not waits:
        return None
    where = "; ".join(f"rank {r.rank}: {r.external_waits} wait(s), {r.external_wait_us / 1000:.1f} ms" for r in waits)
    how = ("kept as traced: the part of each traced wait that the rank's own work does not explain" if mode == "replay"
           else "priced by the traced wait (what replaying the trace leaves beyond the rank's own work), labelled "
                "'external wait' in --export-trace")
    return f"waits for work outside the trace (other ranks, other threads) per iteration: {where}; {how}"


def set_thread_mismatch(store: Store, trace_set_id: int, versions: list[tuple[str, int]],
                        threads: int | None) -> str | None:
    """One line when kernel models in ``versions`` were measured with another intra-op thread count than the
    ``threads`` the trace set was recorded with; None when they agree or either is unknown."""
    if threads is None:
        return None
    other = {t: names for t, names in model_threads(store, versions).items() if t != threads}
    if not other:
        return None
    counts = ", ".join(f"{len(names)} at {t} thread{'s' if t != 1 else ''}" for t, names in sorted(other.items()))
    return (f"trace set {trace_set_id} was recorded with {threads} intra-op thread{'s' if threads != 1 else ''}, but "
            f"kernel models used here were measured with {counts}: measure with `pmdb collect ops --from-trace-set "
            f"{trace_set_id}` (it uses {threads}) and refit")


def unmarked_note(store: Store, trace_set_id: int, iterations: dict[int, list[int]] | None = None) -> str | None:
    """One line when no rank of the trace set marks an iteration (no ``ProfilerStep#n``): the whole trace is then
    predicted as one iteration, and its 'measured' time is the whole trace's. ``iterations``: rank -> its complete
    iterations, when already read (:func:`pmdb.traces.set_rows.complete_iterations`)."""
    if any((complete_iterations(store, trace_set_id) if iterations is None else iterations).values()):
        return None
    return (f"trace set {trace_set_id} marks no iterations (no ProfilerStep#n annotation): the whole trace is "
            f"predicted as one iteration")


def predict_and_store(store: Store, run_id: str, trace_set_id: int | None = None, workload_run_id: str | None = None,
                      **options: Any) -> tuple[int, Prediction]:
    """Predict a trace set (or the trace set of a workload run) and store it under run ``run_id``; ``options`` are
    :class:`~simulator.request.PredictionRequest`'s."""
    if (trace_set_id is None) == (workload_run_id is None):
        raise PmdbError("give a workload run id or --trace-set ID (exactly one)")
    request = PredictionRequest(trace_set_id=trace_set_id, workload_run_id=workload_run_id, **options)
    pred = predict(store, resolve(store, request))
    return store_prediction(store, run_id, pred), pred


def predict_each(store: Store, run_id: str, requests: list[PredictionRequest],
                 sessions: dict[str, PredictionSession] | None = None
                 ) -> tuple[list[tuple[PredictionRequest, int, Prediction]], list[str]]:
    """Resolve, predict and store each request under run ``run_id`` (``predict --all``), one session per target
    (``sessions``, filled as targets come). A trace set's request that cannot be predicted is named in a warning
    line and skipped; a workload run's failure ends the run. Returns (request, prediction id, prediction) of each
    stored one, and the warnings (each prefixed by what it is about)."""
    done, warnings = [], []
    sessions = {} if sessions is None else sessions
    for request in requests:
        about = request.workload_run_id or f"trace set {request.trace_set_id}"
        try:
            pred = predict(store, resolve(store, request, sessions))
            pid = store_prediction(store, run_id, pred)
        except PmdbError as exc:
            if request.trace_set_id is None:
                raise
            warnings.append(f"{about}: {exc}")
            say("warning", f"{about} not predicted: {exc}")
            continue
        done.append((request, pid, pred))
        warnings += [f"{about}: {w}" for w in pred.warnings]
    return done, warnings
