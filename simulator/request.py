"""One prediction request, resolved once. ``pmdb predict`` parses its options into a :class:`PredictionRequest`;
:func:`resolve` looks up, once, everything a prediction of a recorded trace set needs — the trace set (or the one a
workload run captured) and its row, the platform it runs for, the truth it is judged against, the intra-op threads
per rank, the complete iterations of every rank and, in model mode, the prediction session (model versions,
overhead table, lender) — and refuses a bad request with one line before any run row is made. Validation,
prediction (:func:`simulator.predict.predict`) and the stored rows read that one :class:`ResolvedRequest` instead of
going back to the store for the same facts. Times µs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.store import Store
from pmdb.traces.recorded import recorded_threads
from pmdb.traces.set_rows import complete_iterations, trace_set_info, untimed_ranks
from simulator.measured_shapes import MEASURED, check_kernels
from simulator.model_set import check_cache_state
from simulator.session import PredictionSession
from simulator.store_rows import ground_truth, trace_set_for_run
from simulator.threads import run_threads

MODES = ("model", "replay")


@dataclass(frozen=True)
class PredictionRequest:
    """What was asked, parsed and not yet looked up: a trace set, or a workload run (its latest trace set is
    predicted; beside a trace set, the run whose measured time is the truth), the mode and the model-mode options
    (see :class:`~simulator.session.PredictionSession`); ``timeline``: record the simulated iteration op by op
    (``--export-trace``)."""

    trace_set_id: int | None = None
    workload_run_id: str | None = None
    mode: str = "model"
    models: str = "champion"
    target_platform: str | None = None
    cache_state: str | None = None
    overhead_version: int | None = None
    overheads_from: str | None = None
    kernels: str = MEASURED
    timeline: bool = False

    def check(self) -> None:
        """The checks that need no store: cache state, --kernels, mode (one line each)."""
        check_cache_state(self.cache_state)
        check_kernels(self.kernels)
        if self.mode not in MODES:
            raise PmdbError(f"bad --mode {self.mode!r}: use model or replay")

    def options(self) -> dict[str, Any]:
        """The prediction options, as a predict run's arguments record them."""
        return dict(mode=self.mode, models=self.models, target_platform=self.target_platform,
                    cache_state=self.cache_state, overhead_version=self.overhead_version,
                    overheads_from=self.overheads_from, kernels=self.kernels)

    def run_args(self) -> dict[str, Any]:
        """The arguments of the predict run row of one prediction."""
        return {"run_id": self.workload_run_id, "trace_set": self.trace_set_id, **self.options()}

    def session(self, store: Store, platform: str) -> PredictionSession:
        """The model-mode session of this request's options on ``platform`` (refuses a bad model spec, overhead
        version or lender with one line)."""
        return PredictionSession(store, platform, models=self.models, cache_state=self.cache_state,
                                 overhead_version=self.overhead_version, overheads_from=self.overheads_from,
                                 kernels=self.kernels)


@dataclass(frozen=True)
class Truth:
    """What a prediction is judged against: a workload run and its measured µs (None: no run), or the trace's own
    time; ``note`` one line saying which, where it needs saying."""

    workload_run_id: str | None
    measured_us: float | None
    note: str | None = None


@dataclass(frozen=True)
class ResolvedRequest:
    """A request with everything looked up once (read it, never change it): the trace set's row
    (``v_trace_sets`` with its platform's semantics), the target, the truth, the intra-op threads per rank, rank ->
    complete iterations (empty lists: none marked) and, in model mode, the session on the target."""

    request: PredictionRequest
    trace_set_id: int
    trace_set: dict[str, Any] = field(repr=False)
    target_platform: str
    truth: Truth
    iterations: dict[int, list[int]] = field(repr=False)
    threads: int | None = None            # model mode: the truth run's, else the trace set's (None: unknown)
    run_threads: int | None = None        # model mode: the truth run's alone
    session: PredictionSession | None = field(default=None, repr=False)

    @property
    def mode(self) -> str:
        return self.request.mode

    @property
    def source_platform(self) -> str:
        """The platform the trace set was recorded on."""
        return str(self.trace_set["platform"])

    @property
    def source_semantics(self) -> Semantics:
        return Semantics(self.trace_set["semantics"])

    @property
    def workload_id(self) -> int | None:
        value = self.trace_set.get("workload_id")
        return None if value is None or pd.isna(value) else int(value)

    @property
    def unmarked(self) -> bool:
        """No rank marks an iteration: the whole trace is one iteration."""
        return not any(self.iterations.values())

    @property
    def lender(self) -> str | None:
        """The platform whose overhead table a model-mode prediction borrows (None: the target's own, or replay)."""
        if self.session is None or self.session.overheads_platform == self.target_platform:
            return None
        return self.session.overheads_platform


def resolve(store: Store, request: PredictionRequest,
            sessions: dict[str, PredictionSession] | None = None) -> ResolvedRequest:
    """Look up everything ``request`` needs, once, and refuse a bad one with one line (unknown trace set, run or
    platform; a derived set without traces; replay on another platform; replay of ranks without times; a bad model
    spec, overhead version or lender). Writes nothing but the default lender's shipped table (once per store).
    ``sessions``: target -> a session of the same options to reuse (``predict --all``); a new one is added."""
    request.check()
    if request.trace_set_id is None and request.workload_run_id is None:
        raise PmdbError("give a workload run id or --trace-set ID")
    trace_set_id = (int(request.trace_set_id) if request.trace_set_id is not None
                    else trace_set_for_run(store, request.workload_run_id))
    info = trace_set_info(store, trace_set_id)
    if info["source"] == "derived" and not store.scalar("SELECT count(*) FROM traces WHERE trace_set_id = ?",
                                                         [trace_set_id]):
        raise PmdbError(f"trace set {trace_set_id} was derived (no traces: {info['label']}); predict a configuration "
                        f"that was not run with `pmdb predict --what-if --trace-set PARENT ...`")
    source = str(info["platform"])
    target = request.target_platform or source
    if request.mode == "replay" and target != source:
        platforms.load(store, target)   # an unknown name is named first
        raise PmdbError("replay mode takes every time from the trace itself: it has no target platform "
                        "(use --mode model with --target-platform)")
    truth = _truth(store, info, target, request.mode, request.workload_run_id)
    iterations = complete_iterations(store, trace_set_id)
    if request.mode == "replay":
        untimed = untimed_ranks(store, trace_set_id)
        if untimed:
            raise PmdbError(f"trace set {trace_set_id} has no times on rank(s) {', '.join(map(str, untimed))} "
                            f"(an execution trace alone): replay takes every time from a Kineto trace; predict it "
                            f"in model mode instead")
        return ResolvedRequest(request, trace_set_id, info, target, truth, iterations)
    session = (sessions or {}).get(target) or request.session(store, target)
    target = session.platform.name
    if sessions is not None:
        sessions[target] = session
    ran = run_threads(store, truth.workload_run_id)
    threads = ran or recorded_threads(store, trace_set_id, info)
    return ResolvedRequest(request, trace_set_id, info, target, truth, iterations, threads, ran, session)


def _truth(store: Store, info: dict[str, Any], target: str, mode: str, workload_run_id: str | None) -> Truth:
    """The truth and one line saying which: in model mode on the platform the trace set was recorded on, the
    unprofiled time given at import wins over any workload run but one asked for; a prediction judged against its
    own trace set says so (the profiled iteration); a workload run's truth needs no line."""
    trace_set_id = int(info["trace_set_id"])
    run_id, measured = ground_truth(store, trace_set_id, target, mode, workload_run_id, info=info)
    given = info.get("given_measured_us")
    given = None if given is None or pd.isna(given) else float(given)
    if mode == "model" and workload_run_id is None and given is not None and str(info["platform"]) == target:
        return Truth(None, given, f"truth: measured {given / 1000:.1f} ms (given at import)")
    if run_id is not None or measured is None:
        return Truth(run_id, measured)
    hint = "" if given is not None or mode == "replay" else (
        f"; `pmdb collect trace --trace-set {trace_set_id} --measured-ms X` gives the unprofiled time")
    return Truth(run_id, measured, f"truth: the profiled iteration, {measured / 1000:.1f} ms (slowed by the "
                                   f"profiler){hint}")
