"""One prediction session: everything model mode predicts with on one target platform — the platform record and its
execution semantics, the selected kernel/collective model versions, the overhead table, the core rule and the timing
of a graph's ops. ``pmdb predict``, the sharding study and anything later that predicts use it. Times µs."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.platform import Platform
from pmdb.store import Store
from pmdb.traces.graph import TraceGraph
from pmdb.traces.phases import PHASES
from simulator import chrome_trace
from simulator import semantics as sem_mod
from simulator.cross_gpu_range import SpecRange, spec_range
from simulator.embedding_stats import EmbeddingStats
from simulator.engine import SimResult, TimedOp, simulate, steady_period
from simulator.llc_found import LlcFound, run_llc_found
from simulator.measured_shapes import MEASURED, ShapeMedians, check_kernels
from simulator.model_set import (REUSE, ModelSelection, ModelSet, Overheads, check_cache_state, default_lender,
                                 load_model_set)
from simulator.store_rows import ModelUse, Prediction
from simulator.threads import comm_shares_core
from simulator.timing import ModelTiming


def phase_programs(graph: TraceGraph, programs: list[list[TimedOp]]) -> dict[str, list[list[TimedOp]]]:
    """Each training phase's ops alone (per rank, in order), with dependencies renumbered and those on ops of another
    phase dropped: what a measurement that times each phase on its own (synchronising in between) runs."""
    out: dict[str, list[list[TimedOp]]] = {}
    for phase in PHASES:
        per_rank = []
        for rank, program in zip(graph.ranks, programs):
            keep = [i for i, op in enumerate(rank.ops) if op.phase == phase]
            index = {old: new for new, old in enumerate(keep)}
            ops = []
            for i in keep:
                timed = replace(program[i], waits_on=tuple(index[j] for j in program[i].waits_on if j in index))
                ops.append(timed)
            per_rank.append(ops)
        if any(per_rank):
            out[phase] = per_rank
    return out


def fit_hint(store: Store, platform: str) -> str:
    """How to give ``platform`` kernel models: from its own measurements (``pmdb fit --platform``), or, for a GPU
    known only by its spec sheet, from the kernel tables of other GPUs (``pmdb fit cross-gpu --target``)."""
    own = store.scalar("SELECT count(*) FROM v_op_measurements WHERE platform = ?", [platform])
    sheet = store.scalar("SELECT count(*) FROM gpu_specs WHERE platform = ?", [platform])
    if own or not sheet:
        return f"fit models with `pmdb fit --platform {platform}`"
    from fitters.cross_gpu import gpus_with_tables   # the cross-GPU fit's own sources (sklearn: only here)

    sources = len(set(gpus_with_tables(store)["platform"]) - {platform})
    if sources >= 2:
        return (f"it has a spec sheet and no measurements: fit cross-GPU models from the {sources} other GPUs with "
                f"kernel timings with `pmdb fit cross-gpu --target {platform}`")
    return (f"it has a spec sheet and no measurements: import the kernel tables of two or more other GPUs "
            f"(`pmdb collect import-ops`) and fit cross-GPU models with `pmdb fit cross-gpu --target {platform}`")


@dataclass
class Simulated:
    """One graph simulated in model mode."""

    result: SimResult             # one iteration from an idle machine
    predicted_us: float           # steady-state iteration time
    models: list[ModelUse]        # versions used and how many ops each priced
    unmodelled: list[dict]        # ops no model priced, with their share of the traced time and of the work
    selection: ModelSelection     # what was selected, with the core rule's outcome
    phases: dict[str, float] = field(default_factory=dict)  # phase -> its ops alone from an idle machine (µs)
    iteration: chrome_trace.SimulatedIteration | None = None  # every op's place, when asked for (--export-trace)
    measured_ops: int = 0         # ops priced by the measurement of their exact shape (--kernels measured)
    spec_range: SpecRange | None = None   # cross-GPU priced kernels as far off as on each held-out GPU


class PredictionSession:
    """Loads a target platform's models and overheads once; simulates any number of graphs on it.

    ``models`` is an alias ('champion', 'latest') or a version spec 'name:version,...'; ``cache_state`` warm, cold,
    device or blend (None: per platform kind — cold on CPUs, device timings on GPUs); ``overhead_version`` None for
    the latest of the platform; ``kernels`` 'measured' prices an op whose exact shape was microbenchmarked on the
    target at the graph's thread count by that measurement (:mod:`simulator.measured_shapes`), 'models' never.
    ``overheads_from`` borrows another platform's overhead table (same semantics): a GPU known only by its spec
    sheet has no traces of its own to take its host launch path from; without it (and without
    ``overhead_version``) a GPU target with no table borrows the default lender's (:func:`default_lender`)."""

    def __init__(self, store: Store, target_platform: str, *, models: str = "champion",
                 cache_state: str | None = None, overhead_version: int | None = None,
                 overheads_from: str | None = None, kernels: str = MEASURED):
        check_cache_state(cache_state)
        check_kernels(kernels)
        self.platform: Platform = platforms.load(store, target_platform)
        self.models: ModelSet = load_model_set(store, self.platform.name, models, cache_state,
                                               self.platform.semantics)
        self.measured = ShapeMedians.load(store, self.platform.name) if kernels == MEASURED else None
        self.models.selection = self.models.selection.measuring(
            kernels, None if self.measured is None else self.measured.upto)
        # how to fit models, said only when there are none (:meth:`missing_models`)
        self.fit_hint = None if self.models.kernels else fit_hint(store, self.platform.name)
        self.overheads_platform = self.platform.name
        self.default_lender = None
        if overheads_from is None and overhead_version is None:
            self.default_lender = default_lender(store, self.platform.name, self.platform.semantics)
            overheads_from = self.default_lender
        if overheads_from is not None and overheads_from != self.platform.name:
            lender = platforms.load(store, overheads_from)
            if lender.semantics != self.platform.semantics:
                raise PmdbError(f"platform {lender.name} runs {lender.semantics.value}, {self.platform.name} runs "
                                f"{self.platform.semantics.value}: its overhead table does not describe this "
                                f"target's host path")
            self.overheads_platform = lender.name
        self.overheads: Overheads = Overheads.latest(store, self.overheads_platform, overhead_version)
        if overheads_from is not None and self.overheads.version is None:
            raise PmdbError(f"platform {self.overheads_platform} has no overhead table to lend: fit one with "
                            f"`pmdb fit overheads --platform {self.overheads_platform}`")

    def missing_overheads(self) -> str | None:
        """One line naming the documented default when the overhead table is not the target's own: none at all
        (host overheads priced at 0 µs), or one borrowed from another platform."""
        if self.overheads.version is not None and self.overheads_platform == self.platform.name:
            return None
        if self.overheads.version is not None:
            lent = (f"host overheads (T1-T5) from platform {self.overheads_platform}'s overhead version "
                    f"{self.overheads.version}, not {self.platform.name}'s own")
            if self.default_lender is not None:
                lent += " (the default lender of a GPU without a table; --overheads-from picks another)"
            return lent
        return (f"platform {self.platform.name} has no overhead table: host overheads (T1-T5) are priced at 0 µs; "
                f"fit them from its traces with `pmdb fit overheads --platform {self.platform.name}` or borrow "
                f"another platform's with --overheads-from")

    def missing_models(self) -> str | None:
        """One line when the platform has no kernel model at all: every op is then priced by the roofline of its
        peaks (measured, or nominal from a spec sheet) or keeps its traced time."""
        if self.models.kernels:
            return None
        return (f"platform {self.platform.name} has no fitted kernel models: ops are priced by the roofline of its "
                f"peaks or keep their traced times; {self.fit_hint}")

    @property
    def detail(self) -> bool:
        """Whether graphs need every nested op (CPU overheads are per op call, so sync-host platforms do)."""
        return self.platform.sync_host

    @property
    def reuse(self) -> bool:
        """Whether graphs need their ops' reuse distances (``--cache-state reuse``, :mod:`simulator.cache_levels`)."""
        return self.models.selection is not None and self.models.selection.cache_state == REUSE

    def reuse_with(self, found: LlcFound | None) -> bool:
        """Whether a graph is priced by reuse distance given the LLC its run found: ``--cache-state reuse``, or the
        default on a CPU when the run (or the platform's op sweeps) recorded that LLC."""
        default = self.models.selection is None or self.models.selection.cache_state == "default"
        return self.reuse or (default and self.platform.sync_host and found is not None)

    def llc_found(self, store: Store, workload_run_id: str | None) -> LlcFound | None:
        """The LLC a CPU run measured here found (else the platform's op sweeps'), where reuse pricing may use it:
        ``--cache-state reuse`` or the default (:mod:`simulator.llc_found`); None elsewhere."""
        state = self.models.selection.cache_state if self.models.selection is not None else "default"
        if not self.platform.sync_host or state not in ("default", REUSE):
            return None
        return run_llc_found(store, workload_run_id, self.platform.name, self.platform.cache_bytes[1])

    def shares_core(self, world_size: int, threads: int | None) -> bool:
        """The core rule for a graph of ``world_size`` ranks of ``threads`` intra-op threads each."""
        return comm_shares_core(self.platform, world_size, threads)

    def simulate(self, graph: TraceGraph, embedding: EmbeddingStats, threads: int | None,
                 timeline: bool = False, llc_found: LlcFound | None = None) -> Simulated:
        """Price every op of ``graph`` with the session's models and run Algorithm 1 over its ranks (``timeline``:
        also record where every op went, :attr:`Simulated.iteration`; ``llc_found``: the LLC the run found, for
        reuse pricing: ``--cache-state reuse`` or a CPU's default, :mod:`simulator.llc_found`)."""
        timing = ModelTiming(self.models, self.overheads, self.platform.semantics, embedding,
                             self.platform.cache_bytes, self.measured, threads, llc_found)
        programs = timing.programs(graph)
        shared = self.shares_core(len(graph.ranks), threads)
        engine = sem_mod.get(self.platform.semantics, comm_shares_core=shared)
        iteration = None
        if timeline:
            iteration = chrome_trace.recorded(graph, programs, engine, "model", timing.priced_by, self.overheads)
            result = iteration.result
        else:
            result = simulate(programs, engine)
        used = [ModelUse(n, v, c) for (n, v), c in sorted(timing.usage.models.items())]
        phases = {phase: simulate(ops, engine).predicted_us
                  for phase, ops in phase_programs(graph, programs).items()}

        def step_of(factors: dict[int, float]) -> float:
            moved = timing.rescaled(graph, factors)
            return steady_period(moved, engine, simulate(moved, engine))

        span = spec_range(self.models, timing.priced_by, timing.op_times, step_of)
        return Simulated(result, steady_period(programs, engine, result), used,
                         timing.usage.unmodelled(graph.measured_us, timing.work_us),
                         self.models.selection.sharing_core(shared), phases, iteration, timing.usage.measured,
                         span)

    def prediction(self, graph: TraceGraph, embedding: EmbeddingStats, *, source_platform: str,
                   trace_set_id: int = -1, threads: int | None = None, measured_us: float | None = None,
                   workload_run_id: str | None = None, timeline: bool = False,
                   llc_found: LlcFound | None = None) -> Prediction:
        """A storable model-mode prediction of ``graph`` (``trace_set_id`` -1 until a derived graph is stored;
        ``timeline``: with its recorded iteration, ``Prediction.iteration``)."""
        started = time.perf_counter()
        run = self.simulate(graph, embedding, threads, timeline, llc_found)
        return Prediction(trace_set_id=int(trace_set_id), mode="model", source_platform=source_platform,
                          target_platform=self.platform.name, result=run.result, predicted_us=run.predicted_us,
                          iterations=1, measured_us=measured_us, workload_run_id=workload_run_id,
                          models=run.models, overhead_version=self.overheads.version,
                          model_selection=run.selection, unmodelled=run.unmodelled, phases_us=run.phases,
                          elapsed_s=time.perf_counter() - started, iteration=run.iteration,
                          measured_ops=run.measured_ops, spec_range=run.spec_range)
