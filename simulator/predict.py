"""Predict a trace set's per-iteration time (model or replay mode), judge it against its ground truth and store
it with the exact model versions and overhead version used. Times µs."""
from __future__ import annotations

import contextlib
import gc
import statistics
import time
from typing import Any, Iterator

import pandas as pd
from tqdm import tqdm

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.notes import say
from pmdb.platform import Semantics
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import TraceGraph
from pmdb.traces.recorded import given_measured_us, recorded_threads
from pmdb.traces.set_rows import complete_iterations, trace_set_info, untimed_ranks
from simulator import chrome_trace
from simulator import semantics as sem_mod
from simulator.embedding_stats import EmbeddingStats
from simulator.engine import SimResult, simulate, steady_period
from simulator.measured_shapes import MEASURED, MODELS
from simulator.pending import pending_runs  # noqa: F401  (pmdb predict --all; kept importable from here)
from simulator.store_rows import Prediction, ground_truth, store_prediction, trace_set_for_run
from simulator.replay import replay_programs
from simulator.session import PredictionSession
from simulator.threads import model_threads, run_threads, thread_mismatch

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


def _replay(store: Store, trace_set_id: int, semantics: Semantics,
            timeline: bool = False) -> tuple[SimResult, float, int, chrome_trace.SimulatedIteration | None]:
    """Every complete iteration replayed; the median one (by steady-state time) represents them (``timeline``:
    with that iteration recorded op by op)."""
    runs = [(period, single, graph) for graph, period, single in replay_iterations(store, trace_set_id, semantics)]
    runs.sort(key=lambda r: r[0])
    median = statistics.median(r[0] for r in runs)
    period, single, graph = runs[(len(runs) - 1) // 2]
    return single, median, len(runs), chrome_trace.replayed(graph, semantics) if timeline else None


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
                      overheads_from: str | None = None, timeline: bool = False,
                      kernels: str = MEASURED) -> Prediction:
    """Simulate a stored trace set; nothing is written (see :func:`predict_and_store`). In model mode, kernel models
    fitted at another thread count than the ground-truth workload run's give one warning line on stderr (and
    ``Prediction.warnings``). ``timeline``: also record the simulated iteration op by op (``Prediction.iteration``,
    exported by :mod:`simulator.chrome_trace`)."""
    with _collector_paused():
        return _predict(store, trace_set_id, mode=mode, models=models, target_platform=target_platform,
                        cache_state=cache_state, workload_run_id=workload_run_id, overhead_version=overhead_version,
                        overheads_from=overheads_from, timeline=timeline, kernels=kernels)


def _predict(store: Store, trace_set_id: int, *, mode: str, models: str, target_platform: str | None,
             cache_state: str | None, workload_run_id: str | None, overhead_version: int | None,
             overheads_from: str | None = None, timeline: bool = False, kernels: str = MEASURED) -> Prediction:
    if mode not in MODES:
        raise PmdbError(f"bad --mode {mode!r}: use model or replay")
    started = time.perf_counter()
    info = trace_set_info(store, trace_set_id)
    if info["source"] == "derived" and not store.scalar("SELECT count(*) FROM traces WHERE trace_set_id = ?",
                                                         [trace_set_id]):
        raise PmdbError(f"trace set {trace_set_id} was derived (no traces: {info['label']}); predict a configuration "
                        f"that was not run with `pmdb predict --what-if --trace-set PARENT ...`")
    source = str(info["platform"])
    target = target_platform or source
    if mode == "replay" and target != source:
        raise PmdbError("replay mode takes every time from the trace itself: it has no target platform "
                        "(use --mode model with --target-platform)")
    run_id, measured = ground_truth(store, trace_set_id, target, mode, workload_run_id)
    run_id, measured, truth = _set_truth(store, info, target, mode, run_id, measured, workload_run_id)
    if truth:
        say("note", truth)
    unmarked = unmarked_note(store, trace_set_id)
    if unmarked:
        say("warning", unmarked)
    if mode == "replay":
        untimed = untimed_ranks(store, trace_set_id)
        if untimed:
            raise PmdbError(f"trace set {trace_set_id} has no times on rank(s) {', '.join(map(str, untimed))} "
                            f"(an execution trace alone): replay takes every time from a Kineto trace; predict it "
                            f"in model mode instead")
        result, predicted, iterations, iteration = _replay(store, trace_set_id,
                                                           platforms.load(store, target).semantics, timeline)
        external = external_note(result, mode)
        if external:
            say("note", external)
        return Prediction(trace_set_id=int(trace_set_id), mode=mode, source_platform=source, target_platform=target,
                          result=result, predicted_us=predicted, iterations=iterations, measured_us=measured,
                          workload_run_id=run_id, elapsed_s=time.perf_counter() - started, iteration=iteration)
    session = PredictionSession(store, target, models=models, cache_state=cache_state,
                                overhead_version=overhead_version, overheads_from=overheads_from, kernels=kernels)
    workload_id = None if pd.isna(info.get("workload_id")) else int(info["workload_id"])
    graph = load_graphs(store, trace_set_id, pick="best", detail=session.detail, reuse=session.reuse)[0]
    pred = session.prediction(graph, EmbeddingStats.from_store(store, workload_id), source_platform=source,
                              trace_set_id=trace_set_id, threads=_threads(store, trace_set_id, run_id),
                              measured_us=measured, workload_run_id=run_id, timeline=timeline)
    used = [(m.name, m.version) for m in pred.models]
    pred.warnings = [n for n in [thread_mismatch(store, run_id, used) if run_threads(store, run_id) is not None
                                 else set_thread_mismatch(store, trace_set_id, used)] if n]
    pred.defaults = [n for n in [session.missing_models(), session.missing_overheads()] if n]
    external = external_note(pred.result, mode)
    if external:
        pred.defaults.append(external)
    for note in pred.defaults:
        say("note", note)
    if not pred.predicted_us > 0:
        raise PmdbError(f"trace set {trace_set_id} predicts {pred.predicted_us:.1f} µs on {target}: nothing in it was "
                        f"priced (no times in the trace and no fitted models of {target}); fit models with "
                        f"`pmdb fit --platform {target}` or import a trace with times")
    if pred.self_priced:
        pred.warnings.append(f"{100 * pred.self_priced_share:.0f}% of the predicted work kept its traced time "
                             f"(no model priced it): replay, not a model; left out of model error statistics")
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


def _threads(store: Store, trace_set_id: int, run_id: str | None) -> int | None:
    """Intra-op threads per rank of what is predicted: the ground-truth run's, else the trace set's."""
    return run_threads(store, run_id) or recorded_threads(store, trace_set_id)


def _set_truth(store: Store, info: dict[str, Any], target: str, mode: str, run_id: str | None,
               measured: float | None, workload_run_id: str | None) -> tuple[str | None, float | None, str | None]:
    """(workload run, measured µs, one line saying which truth): in model mode on the platform the trace set was
    recorded on, the unprofiled time given at import wins over any workload run but one asked for; a prediction
    judged against its own trace set says so (the profiled iteration); a workload run's truth needs no line."""
    given = given_measured_us(store, int(info["trace_set_id"]))
    if mode == "model" and workload_run_id is None and given is not None and str(info["platform"]) == target:
        return None, given, f"truth: measured {given / 1000:.1f} ms (given at import)"
    if run_id is not None or measured is None:
        return run_id, measured, None
    hint = "" if given is not None or mode == "replay" else (
        f"; `pmdb collect trace --trace-set {int(info['trace_set_id'])} --measured-ms X` gives the unprofiled time")
    return run_id, measured, f"truth: the profiled iteration, {measured / 1000:.1f} ms (slowed by the profiler){hint}"


def set_thread_mismatch(store: Store, trace_set_id: int, versions: list[tuple[str, int]]) -> str | None:
    """One line when kernel models in ``versions`` were measured with another intra-op thread count than the trace
    set was recorded with; None when they agree or either is unknown."""
    threads = recorded_threads(store, trace_set_id)
    if threads is None:
        return None
    other = {t: names for t, names in model_threads(store, versions).items() if t != threads}
    if not other:
        return None
    counts = ", ".join(f"{len(names)} at {t} thread{'s' if t != 1 else ''}" for t, names in sorted(other.items()))
    return (f"trace set {trace_set_id} was recorded with {threads} intra-op thread{'s' if threads != 1 else ''}, but "
            f"kernel models used here were measured with {counts}: measure with `pmdb collect ops --from-trace-set "
            f"{trace_set_id}` (it uses {threads}) and refit")


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


def check_options(store: Store, platform: str, *, mode: str, models: str, cache_state: str | None,
                  overhead_version: int | None, overheads_from: str | None, **_: Any) -> None:
    """Refuse bad prediction options (model spec, overhead version, a lender platform) with one line before a run
    row is made: the session that a model-mode prediction builds checks them (its models load lazily; it loads no
    measured shapes: --kernels is checked by the CLI)."""
    if mode == "model":
        PredictionSession(store, platform, models=models, cache_state=cache_state,
                          overhead_version=overhead_version, overheads_from=overheads_from, kernels=MODELS)

