"""Model-mode timing: kernel times from the target platform's models, CPU times from its overhead table (µs).

Every op (and, on a CPU, every nested op an op is composed of) is mapped to the ops collector's vocabulary
(:mod:`pmdb.traces.opmap`); the rows of each model are predicted in ONE batched call per model per trace. Then:

* whole-op models: a registered kernel model of (op, pass) gives the op's device time (on a CPU its time on the
  calling thread, which the microbenchmark measured including its dispatch);
* a GPU op's backward without a model of its own: its forward model scaled by the roofline ratio of the passes;
* otherwise an op is composed from the overhead table: T2 + its children's times + T5 between them + T3, a leaf
  costing its T5 (whole-op time); a leaf the table does not hold but opmap maps gets the roofline of the platform's
  measured peaks; anything else keeps its traced time and is reported as unmodelled (count, share of the trace);
* collectives: the collective model at the trace's world size, with the message size the max over ranks;
* CPU gaps: T1 before each op; GPU launches: T2 before the first, T5 between, T4 per launch API, T3 after;
* a GPU host wait for work outside the trace (other ranks, other threads): the traced wait beyond what the rank's
  own work explains when the trace is replayed (``external_us``, labelled "trace (traced wait)").
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd

from collectors.ops.timer import LOOP
from pmdb.platform import Semantics
from simulator.embedding_stats import EmbeddingStats
from simulator import semantics as sem_mod
from simulator.engine import TimedOp, Timeline, simulate
from simulator.replay import one_launch, replay_programs
from pmdb.traces.graph import Op, Stream, TraceGraph
from simulator.cache_levels import UNKNOWN, between, cold_share, levels_known
from simulator.measured_shapes import MICROBENCHMARK, MINED, MINED_SELF, ShapeMedians
from simulator.model_set import BLEND, CACHE_PREFERENCE, CACHE_STATES, PAIRED, REUSE, ModelSet, Overheads
from pmdb.traces.opmap import NO_WORK, Mapped, implementation, map_op, untimed_work
from fitters.overheads import input_size_class

COMPUTE, COMM = int(Stream.COMPUTE), int(Stream.COMM)


def _z(value: float | None) -> float:
    return 0.0 if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _default_state(models: ModelSet, semantics: Semantics) -> str:
    """The cache state measurements are taken in for ops no model prices: the selection's, else the platform
    kind's first preference (cold on CPUs, device timings on GPUs)."""
    state = models.selection.cache_state if models.selection is not None else "default"
    if state in CACHE_STATES and state not in PAIRED:
        return state
    return CACHE_PREFERENCE.get(semantics, ("cold",))[0]


@dataclass
class _Row:
    """One op instance that a model (or the roofline) predicts."""

    node: Op
    mapped: Mapped
    extra: dict[str, Any] = field(default_factory=dict)
    implementation: str | None = None
    tables: list[dict[str, Any]] | None = None   # an embedding lookup's tables as microbenchmarked (E, D, B, L, source)


@dataclass
class Usage:
    """Which model versions predicted how many ops; what fell back to the roofline or the trace."""

    models: dict[tuple[str, int], int] = field(default_factory=dict)
    # (op, kind) -> [count, traced µs, predicted µs]; kind: roofline, trace (its traced time) or unpriced (nothing
    # prices its device work: an untimed graph's op that no model, no roofline and no trace can time)
    fallback: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    measured: int = 0   # ops priced by the measured median of their exact shape (--kernels measured)
    external_us: float = 0.0  # waits for work outside the trace, priced by their traced time (all ranks)
    external_waits: int = 0

    def fell_back(self, name: str, kind: str, traced_us: float, predicted_us: float | None = None) -> None:
        entry = self.fallback.setdefault((name, kind), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += _z(traced_us)
        entry[2] += _z(traced_us) if predicted_us is None else _z(predicted_us)

    def unmodelled(self, measured_us: float, predicted_us: float | None = None) -> list[dict[str, Any]]:
        """[{"op", "count", "fallback", "measured_share", "predicted_share"}] sorted by share: of the traced iteration
        time (None for an untimed graph) and of the predicted work (µs summed over ranks and streams)."""
        timed = measured_us and not math.isnan(measured_us)
        out = [{"op": name, "count": int(c), "fallback": kind,
                "measured_share": (t / measured_us) if timed else None,
                "predicted_share": (p / predicted_us) if predicted_us else None}
               for (name, kind), (c, t, p) in self.fallback.items()]
        return sorted(out, key=lambda r: (-(r["measured_share"] or 0.0), -(r["predicted_share"] or 0.0)))


def _collective_sizes(graph: TraceGraph) -> dict[int, float]:
    """The k-th collective's message size (bytes): the largest over the ranks."""
    sizes: dict[int, float] = {}
    for rg in graph.ranks:
        for k, i in enumerate(rg.collectives()):
            size = rg.ops[i].comm_bytes
            if not math.isnan(size):
                sizes[k] = max(sizes.get(k, 0.0), size)
    return sizes


def launched(ops: list[Op]) -> bool:
    """Whether a rank's ops launched any kernel (False: a graph that timed none, a shape-only capture or a CPU
    trace)."""
    return any(k.launch_name for op in ops for k in op.kernels)


class ModelTiming:
    """Turns TraceGraphs into timed programs with a platform's models and overheads."""

    def __init__(self, models: ModelSet, overheads: Overheads, semantics: Semantics,
                 embedding: EmbeddingStats | None = None, cache_bytes: tuple[int | None, int | None] = (None, None),
                 measured: ShapeMedians | None = None, threads: int | None = None,
                 llc_found: Callable[[float], float] | None = None):
        self.models = models
        # --kernels measured: ops whose exact shape was microbenchmarked at ``threads`` are priced by that median
        self.measured, self.threads = measured, threads
        self.default_state = _default_state(models, semantics)
        self.sync_host = semantics == Semantics.SYNC_HOST
        state = models.selection.cache_state if models.selection is not None else "default"
        # --cache-state reuse, and a CPU's default where the run recorded the LLC it found (``llc_found``,
        # simulator.llc_found): (L2, LLC) bytes and reuse distances place each op between its warm and cold model
        # (cache_levels); the default without it is cold
        reuse = state == REUSE or (state == "default" and self.sync_host and llc_found is not None)
        self.cache_levels = cache_bytes if reuse and levels_known(*cache_bytes) else None
        self.reuse = reuse
        self.paired = reuse or state == BLEND   # whether an op's warm model takes part
        self.llc_found = llc_found if reuse else None   # the LLC the run found, else LRU over the sysfs LLC
        # what a forward call pays for its code path away, where the platform's op sweeps timed it (code_away)
        self.code_away = getattr(self.llc_found, "code_away", None)
        self.overheads = overheads
        # on a CPU, unless a cache state was chosen: an embedding lookup's forward whose exact tables were timed in
        # a training loop of their own (collectors.ops.timer.time_loop) is priced by that, the caches as a step
        # leaves them. Not its backward (RULES_VERSION 11): the loop runs it right after its forward, a step runs the
        # rest of its forward and backward between them, and the backward then takes x1.4-1.6 its loop time
        # (benchmarks/embedding_backward_in_step.py); it is priced like any op, by its warm and cold timings and
        # the reuse of the tables its kernel reads (pmdb.traces.reuse: a node reads what the ops below it read)
        self.loop = self.sync_host and state in ("default", REUSE)
        self.embedding = embedding or EmbeddingStats()
        self.usage = Usage()
        self.untimed = False   # the rank being collected timed no kernel (and the target is a GPU)
        self._time: dict[int, float] = {}
        self.priced_by: dict[int, str] = {}  # id(op) -> what priced it: 'name:version', 'roofline', ...
        self.trace_set_id: int | None = None  # of the graph priced (rows mined from it price 'mined-self')
        self._comm: dict[tuple[tuple[str, int], float], float] = {}
        self._waits: tuple[TraceGraph, list[dict[int, float]]] | None = None   # (graph, its external waits)

    @property
    def op_times(self) -> dict[int, float]:
        """id(op) -> its priced device (GPU) or thread (CPU) time, µs, of the graph last priced."""
        return self._time

    @property
    def work_us(self) -> float:
        """Summed op work of the graph as priced (model and roofline times, plus traced fallbacks), µs."""
        traced = sum(p for (_, kind), (_, _, p) in self.usage.fallback.items() if kind == "trace")
        return float(sum(self._time.values()) + traced)

    # ---- batched prediction --------------------------------------------------------------------------------------
    def _collect(self, node: Op, rank: int, rows: list[_Row]) -> None:
        """Map a node; when no whole-op model covers it on a CPU, descend into its children."""
        mapped = map_op(node)
        if mapped is None and self.untimed:
            mapped = untimed_work(node)   # no kernel of it was timed: its work by the roofline, not nothing
        mapped = self.models.priced_as(mapped, lambda m: self._was_measured(node, m))  # scalar ops: fallback
        if isinstance(mapped, Mapped) and mapped.op == "embedding_lookup":
            extra, tables = self.embedding.lookup(rank, node, mapped)
            if extra is not None and (self.models.kernel(mapped.op, mapped.pass_) is not None
                                      or self._tables_measured(node, mapped, tables)):
                rows.append(_Row(node, mapped, extra, implementation(node, mapped), tables))
                return
        elif isinstance(mapped, Mapped) and (self.models.kernel(mapped.op, mapped.pass_) is not None
                                             or self._was_measured(node, mapped)):
            rows.append(_Row(node, mapped, {}, implementation(node, mapped)))
            return
        if self.sync_host and node.sub:
            for child in node.sub:
                self._collect(child, rank, rows)
        elif isinstance(mapped, Mapped) and mapped.op != "embedding_lookup":
            rows.append(_Row(node, mapped))            # roofline, unless the overhead table holds the leaf

    def _predict(self, rows: list[_Row], sharing_llc: int = 1) -> None:
        """Time every row, one batched call per model; ``sharing_llc``: ranks that share the last-level cache
        (the ranks of a CPU platform share its one host), each getting an equal part of it (reuse mode)."""
        levels = None
        if self.cache_levels is not None:
            l2, llc = self.cache_levels
            levels = (float(l2), max(float(llc) / max(sharing_llc, 1), float(l2)))
        groups: dict[tuple[str, str, str | None], list[_Row]] = {}
        for row in rows:
            groups.setdefault((row.mapped.op, row.mapped.pass_, row.implementation), []).append(row)
        for key, group in groups.items():
            ref = self.models.kernel(*key)
            partner = self.models.warm_partner(*key) if ref is not None and self.paired else None
            shares = None
            if partner is not None and self.reuse:
                shares = np.array([cold_share(r.node.reuse, *levels, self.llc_found, sharing_llc) if levels
                                   else UNKNOWN for r in group])
            states = [m.cache_state or self.default_state for m in (ref, partner) if m is not None]
            exact = self._exact(group, states or [self.default_state], shares)
            left = [i for i, t in enumerate(exact) if t is None]   # the rows no measurement priced
            if not left:
                continue
            group, shares = [group[i] for i in left], None if shares is None else shares[left]
            frame = pd.DataFrame([{**r.mapped.params, **r.extra} for r in group])
            if "threads" not in frame:  # a model fitted across thread counts uses it; unknown: 1, as measured
                frame["threads"] = float(self.threads or 1)
            if ref is not None:
                times = np.asarray(ref.model.predict(frame), dtype=float)
                used = [ref] if partner is None else [ref, partner]
                if partner is not None and self.reuse:  # each op where its operands' reuse distances put it
                    times = between(times, np.asarray(partner.model.predict(frame), dtype=float), shares)
                elif partner is not None:  # in-context between warm and cold caches: their geometric mean
                    times = np.sqrt(times * np.asarray(partner.model.predict(frame), dtype=float))
                for model in used:
                    self.usage.models[(model.name, model.version)] = \
                        self.usage.models.get((model.name, model.version), 0) + len(group)
                label = "+".join(f"{m.name}:{m.version}" for m in used)
                for r, t in zip(group, times):
                    self._time[id(r.node)] = float(t)
                    self.priced_by[id(r.node)] = label
            elif not self.sync_host and key[1] == "bwd" and (scaled := self._scaled_forward(key, frame)) is not None:
                forward = self.models.kernel(key[0], "fwd", key[2])
                for r, t in zip(group, scaled):
                    self._time[id(r.node)] = float(t)
                    self.priced_by[id(r.node)] = f"{forward.name}:{forward.version} scaled-fwd"
                    self.usage.fell_back(r.node.name, "scaled-fwd", r.node.cpu_dur_us, float(t))
            else:
                times = self._roofline(key[:2], frame)
                if times is None:
                    continue
                for r, t in zip(group, times):
                    if not self.sync_host or self.overheads.get(r.node.name, "T5") is None:
                        self._time[id(r.node)] = float(t)
                        self.priced_by[id(r.node)] = "roofline"
                        self.usage.fell_back(r.node.name, "roofline", r.node.cpu_dur_us, float(t))

    def _was_measured(self, node: Op, mapped: Mapped) -> bool:
        """Whether the exact shape of an op no model covers was measured (it is then priced whole, not by its
        nested ops); a microbenchmark counts at the predicted thread count, a mined GPU row at any."""
        if self.measured is None:
            return False
        return self.measured.time(mapped.op, mapped.pass_, implementation(node, mapped), mapped.params,
                                  self.threads, self.default_state) is not None

    def _looped(self, pass_: str) -> bool:
        """Whether an embedding lookup's pass is priced by its 'loop' timing (:attr:`loop`): the forward only."""
        return self.loop and pass_ == "fwd"

    def _tables_measured(self, node: Op, mapped: Mapped, tables: list[dict[str, Any]] | None) -> bool:
        """Whether an embedding lookup over exactly these tables was measured (priced then without a model)."""
        if self.measured is None or self.threads is None or not tables:
            return False
        states = (LOOP, self.default_state) if self._looped(mapped.pass_) else (self.default_state,)
        return any(self.measured.embedding_time(mapped.pass_, implementation(node, mapped), tables, self.threads,
                                                state) is not None for state in states)

    def _price_code_away(self, rows: list[_Row]) -> None:
        """Add to each priced forward call of one rank what its code path away costs (:mod:`simulator.code_away`),
        at the traced µs since the previous forward call of its op and implementation ended (across the iteration's
        wrap for the first: its span is the rows' first start to last end)."""
        timed = [r for r in rows if r.node.start_us == r.node.start_us]
        if len(timed) < 2:
            return

        def end(r: _Row) -> float:
            dur = r.node.cpu_dur_us
            return r.node.start_us + (dur if dur == dur else 0.0)

        period = max(end(r) for r in timed) - min(r.node.start_us for r in timed)
        # forward calls of the forward phase (a backward GEMM is mapped to a forward one, fitters.gemm_shapes)
        calls = sorted((r for r in timed if r.mapped.pass_ == "fwd" and r.node.phase == "fw"
                        and id(r.node) in self._time), key=lambda r: r.node.start_us)
        last: dict[tuple[str, str | None], float] = {}
        for r in calls:                         # the previous iteration's last call of each op
            last[(r.mapped.op, r.implementation)] = end(r) - period
        for r in calls:
            key = (r.mapped.op, r.implementation)
            penalty = self.code_away(key[0], key[1], r.node.start_us - last[key])
            last[key] = end(r)
            if penalty > 0:
                self._time[id(r.node)] += penalty

    def _exact(self, group: list[_Row], states: list[str], shares: np.ndarray | None) -> list[float | None]:
        """Per row, its measured time when its exact shape was microbenchmarked in every cache state the model
        would use (``states``: one, or cold and warm combined as the models are), else None; a measured row is
        timed here (µs). An op priced by rows mined from GPU traces is also listed as fallback 'mined' or
        'mined-self' (:mod:`simulator.measured_shapes`), with its traced device time."""
        if self.measured is None:
            return [None] * len(group)
        out: list[float | None] = []
        for i, r in enumerate(group):
            priced = self._measured_time(r, states, None if shares is None else shares[i:i + 1])
            if priced is None:
                out.append(None)
                continue
            t, label = priced
            self._time[id(r.node)] = t
            self.priced_by[id(r.node)] = label
            self.usage.measured += 1
            if label in (MINED, MINED_SELF):
                traced = sum(_z(k.dur_us) for k in r.node.kernels if k.stream == Stream.COMPUTE)
                self.usage.fell_back(r.node.name, label, traced, t)
            out.append(t)
        return out

    def _measured_time(self, r: _Row, states: list[str], share: np.ndarray | None) -> tuple[float, str] | None:
        """(µs, what priced it) of one row from the microbenchmarks of its exact shape, None when not measured: an
        embedding lookup's forward timed in a training loop by that ('measured-loop', :attr:`loop`), else the
        measurements in ``states`` combined as the models would be ('measured')."""
        lookup = r.mapped.op == "embedding_lookup"
        if lookup and self._looped(r.mapped.pass_):
            looped = self.measured.embedding_time(r.mapped.pass_, r.implementation, r.tables or [], self.threads,
                                                  LOOP)
            if looped is not None:
                return float(looped), "measured-loop"
        if lookup:
            times = [self.measured.embedding_time(r.mapped.pass_, r.implementation, r.tables or [], self.threads,
                                                  state) for state in states]
        else:
            found = [self.measured.priced(r.mapped.op, r.mapped.pass_, r.implementation, r.mapped.params,
                                          self.threads, state, self.trace_set_id) for state in states]
            if any(f is None for f in found):
                return None
            if len(found) == 1:
                return float(found[0][0]), found[0][1]   # a microbenchmark, or mined rows
            if any(label != MICROBENCHMARK for _, label in found):
                return None   # cold and warm combined: microbenchmarks of both states only
            times = [us for us, _ in found]
        if any(t is None for t in times):
            return None
        if len(times) == 1:
            return float(times[0]), MICROBENCHMARK
        if share is not None:
            return float(between(np.array(times[:1]), np.array(times[1:]), share)[0]), MICROBENCHMARK
        return math.sqrt(times[0] * times[1]), MICROBENCHMARK

    def _scaled_forward(self, key: tuple[str, str, str | None], frame: pd.DataFrame) -> np.ndarray | None:
        """A GPU op's backward without a model of its own: its forward model's time scaled by the roofline ratio of
        the two passes (the forward's measured efficiency carried over to the backward's work, µs). Tables that
        hold forward kernels only (NeuSight's) price element-wise, normalisation and softmax gradients this way."""
        forward = self.models.kernel(key[0], "fwd", key[2])
        ratio = self._roofline((key[0], "bwd"), frame), self._roofline((key[0], "fwd"), frame)
        if forward is None or ratio[0] is None or ratio[1] is None:
            return None
        times = np.asarray(forward.model.predict(frame), dtype=float)
        self.usage.models[(forward.name, forward.version)] = \
            self.usage.models.get((forward.name, forward.version), 0) + len(frame)
        return times * ratio[0] / np.maximum(ratio[1], 1e-9)

    def _roofline(self, key: tuple[str, str], frame: pd.DataFrame) -> np.ndarray | None:
        peaks = self.models.peaks
        if not peaks.get("gemm_flops") or not peaks.get("mem_bw"):
            return None
        from fitters.roofline import uncalibrated

        return np.asarray(uncalibrated(key[0], key[1], "float32", peaks).predict(frame), dtype=float)

    # ---- composition -----------------------------------------------------------------------------------------
    def _op_time(self, node: Op) -> float:
        """Time of an op on a CPU: its model, or T2 + children + T5 gaps + T3, or its T5, or its traced time; its
        own time (T2, T3, T5) that of its input size class where the table sampled it (migration 0020)."""
        if id(node) in self._time:
            return self._time[id(node)]
        size = input_size_class(node.input_shapes)
        if node.sub:
            t2, t3, t5 = (self._table(node.name, kind, size) for kind in ("T2", "T3", "T5"))
            return t2 + t3 + t5 * (len(node.sub) - 1) + sum(self._op_time(c) for c in node.sub)
        whole = self.overheads.get(node.name, "T5", size)
        if whole is not None:
            return whole
        if map_op(node) is NO_WORK:
            return self.overheads.typical("T5")
        self.usage.fell_back(node.name, "trace", node.cpu_dur_us)
        return _z(node.cpu_dur_us)

    def _table(self, name: str, kind: str, size: int | None = None) -> float:
        """The overhead of ``kind`` for an op name (of its input size class ``size`` where sampled), else the
        typical one of that kind."""
        value = self.overheads.get(name, kind, size)
        return value if value is not None else self.overheads.typical(kind)

    def _t1(self, op: Op) -> float:
        return self._table(op.name, "T1")

    def _predict_collectives(self, graph: TraceGraph, sizes: dict[int, float]) -> None:
        """One batched call per collective model: time of every (kind, message size) of the trace."""
        wanted: dict[tuple[str, int], set[float]] = {}
        for rg in graph.ranks:
            for k, i in enumerate(rg.collectives()):
                size = sizes.get(k, float("nan"))
                ref = self.models.collective(rg.ops[i].collective or "", len(graph.ranks))
                if ref is not None and not math.isnan(size):
                    wanted.setdefault((ref.name, ref.version), set()).add(size)
        refs = {(r.name, r.version): r for r in self.models.collectives.values()}
        for key, values in wanted.items():
            ordered = sorted(values)
            times = refs[key].model.predict(pd.DataFrame({"max_rank_bytes": ordered}))
            self._comm.update({(key, size): float(t) for size, t in zip(ordered, times)})

    def _comm_time(self, graph: TraceGraph, op: Op, size: float) -> float:
        """A collective's time from its model (predicted in :meth:`_predict_collectives`), else the traced one."""
        ref = self.models.collective(op.collective or "", len(graph.ranks))
        key = None if ref is None else (ref.name, ref.version)
        if key is None or (key, size) not in self._comm:
            traced = sum(_z(k.dur_us) for k in op.kernels if k.stream == Stream.COMM)
            self.usage.fell_back(op.name, "trace", traced)
            return traced
        self.usage.models[key] = self.usage.models.get(key, 0) + 1
        self.priced_by[id(op)] = f"{key[0]}:{key[1]}"
        return self._comm[(key, size)]

    def _range_edge(self, before: str | None, after: str | None) -> float:
        """Host time (µs) of leaving optimizer range ``before`` (its T3) and entering ``after`` (its T2) between two
        consecutive ops (:func:`fitters.overheads.cpu_samples`); nothing where they are the same range or the
        overhead table has no sample of it."""
        if before == after:
            return 0.0
        leave = (self.overheads.get(before, "T3") or 0.0) if before is not None else 0.0
        enter = (self.overheads.get(after, "T2") or 0.0) if after is not None else 0.0
        return leave + enter

    def _cpu_program(self, graph: TraceGraph, rank: int, sizes: dict[int, float]) -> list[TimedOp]:
        out = []
        current: str | None = None   # the optimizer range the previous op ran in
        for i, op in enumerate(graph.ranks[rank].ops):
            edge, current = self._range_edge(current, op.step_range), op.step_range
            timed = TimedOp(t1=self._t1(op) + edge, is_collective=op.is_collective, waits_on=op.waits_on,
                            sync_streams=tuple(int(s) for s in op.sync_streams))
            if op.is_collective:
                # the traced call time of a collective contains its execution and the wait for peers, which the
                # collective model and the synchronisation account for: only launch overheads go on the thread
                launch, after = (self._table(op.name, kind) for kind in ("T2", "T3"))
                timed.kernels = ((COMM, self._comm_time(graph, op, sizes.get(i, float("nan"))), 0.0, launch),)
                timed.t3 = after
            else:
                timed.kernels = ((COMPUTE, self._op_time(op), 0.0, 0.0),)
            out.append(timed)
        out.append(TimedOp(t1=self.overheads.typical("T1") + self._range_edge(current, None)))
        return out

    def _gpu_program(self, graph: TraceGraph, rank: int, sizes: dict[int, float]) -> list[TimedOp]:
        ops = graph.ranks[rank].ops
        kernels_timed = launched(ops)   # False: a CPU trace (or a shape-only capture) on a GPU target
        out = []
        for i, op in enumerate(ops):
            timed = TimedOp(t1=self._t1(op), is_collective=op.is_collective, waits_on=op.waits_on,
                            sync_streams=tuple(int(s) for s in op.sync_streams))
            t2, t3, t5 = (self._table(op.name, kind) for kind in ("T2", "T3", "T5"))
            if not kernels_timed and (op.is_collective or id(op) in self._time):
                # a CPU trace predicted for a GPU: each modelled op launches one kernel of its predicted time
                stream, dur = ((COMM, self._comm_time(graph, op, sizes.get(i, float("nan")))) if op.is_collective
                               else (COMPUTE, self._time[id(op)]))
                timed.kernels, timed.t3 = ((stream, dur, self.overheads.typical("T4"), t2),), t3
                out.append(timed)
                continue
            if not op.kernels:
                if not kernels_timed and not op.is_collective and map_op(op) is None:
                    self.usage.fell_back(op.name, "unpriced", float("nan"), 0.0)  # its device work costs nothing
                timed.cpu_us = t5
                out.append(timed)
                continue
            comm = self._comm_time(graph, op, sizes.get(i, float("nan"))) if op.is_collective else None
            compute = [k for k in op.kernels if k.stream == Stream.COMPUTE]
            measured = sum(_z(k.dur_us) for k in compute)
            total = self._time.get(id(op))
            if total is None and compute:
                self.usage.fell_back(op.name, "trace", measured)
            kernels = []
            again = one_launch(op)   # a CUDA graph's kernels after its first: one launch call, paid once
            for j, k in enumerate(op.kernels):
                if k.stream == Stream.COMM:
                    dur = comm if comm is not None else _z(k.dur_us)
                elif total is None:
                    dur = _z(k.dur_us)
                else:   # the op's predicted time, spread over its kernels as the trace spread it
                    dur = total * (_z(k.dur_us) / measured if measured > 0 else 1.0 / len(compute))
                kernels.append((int(k.stream), dur, 0.0 if again[j] else self._table(k.launch_name, "T4"),
                                0.0 if again[j] else (t2 if j == 0 else t5)))
            timed.kernels, timed.t3 = tuple(kernels), t3
            timed.kernel_waits = op.kernel_waits()
            out.append(timed)
        out.append(TimedOp(t1=self.overheads.typical("T1")))
        return out

    def _external_waits(self, graph: TraceGraph) -> list[dict[int, float]]:
        """Per rank, op index -> its wait for work outside the trace (µs): what replaying the trace on its own
        platform keeps of the op's traced host wait beyond the rank's own work (:mod:`simulator.replay`). Model mode
        prices such a wait by that traced time (labelled): nothing in the trace says what the peers did."""
        if graph.semantics != Semantics.ASYNC_DEVICE:
            return [{} for _ in graph.ranks]
        programs = replay_programs(graph, graph.semantics)
        if not any(t.traced_wait_us for program in programs for t in program):
            return [{} for _ in graph.ranks]
        timeline = Timeline()
        simulate(programs, sem_mod.get(graph.semantics), timeline)
        return [{span.index: sum(b - a for a, b in span.external_waits) for span in spans if span.external_waits}
                for spans in timeline.ranks]

    def programs(self, graph: TraceGraph) -> list[list[TimedOp]]:
        """Per rank, the timed program of one iteration (all model calls batched over every rank)."""
        rows: list[_Row] = []
        self.embedding.reset()
        self.trace_set_id = graph.trace_set_id
        spans = []
        for rank, rg in enumerate(graph.ranks):
            first = len(rows)
            # a graph that timed no kernel (a shape-only capture) on a GPU: ops pmdb cannot model get the roofline
            self.untimed = not self.sync_host and not launched(rg.ops)
            for op in rg.ops:
                if not op.is_collective:
                    self._collect(op, rank, rows)
            spans.append((first, len(rows)))
        self._predict(rows, len(graph.ranks) if self.sync_host else 1)
        if self.code_away is not None:
            for first, end in spans:
                self._price_code_away(rows[first:end])
        sizes = _collective_sizes(graph)
        self._predict_collectives(graph, sizes)
        return self._assemble(graph, sizes)

    def rescaled(self, graph: TraceGraph, factors: dict[int, float]) -> list[list[TimedOp]]:
        """The programs of ``graph``, priced before by :meth:`programs`, with the device time of each op ``id(op)``
        of ``factors`` multiplied by its factor; the pricing and its usage are left as they were."""
        saved_time, saved_usage = self._time, self.usage
        self._time = {key: us * factors.get(key, 1.0) for key, us in saved_time.items()}
        self.usage = Usage()
        try:
            return self._assemble(graph, _collective_sizes(graph))
        finally:
            self._time, self.usage = saved_time, saved_usage

    def _assemble(self, graph: TraceGraph, sizes: dict[int, float]) -> list[list[TimedOp]]:
        """Per rank, the timed program of the priced ops (:attr:`_time`, collectives from :attr:`_comm`; ``sizes``:
        :func:`_collective_sizes` of ``graph``)."""
        by_index = [{i: sizes.get(k, float("nan")) for k, i in enumerate(rg.collectives())} for rg in graph.ranks]
        build = self._cpu_program if self.sync_host else self._gpu_program
        programs = [build(graph, r, by_index[r]) for r in range(len(graph.ranks))]
        if self._waits is None or self._waits[0] is not graph:   # a replay of the trace: once per graph
            self._waits = (graph, self._external_waits(graph) if not self.sync_host else [])
        for program, waits in zip(programs, self._waits[1]):
            for index, wait_us in waits.items():
                program[index].external_us, program[index].external_by = wait_us, "trace (traced wait)"
                self.usage.external_us += wait_us
                self.usage.external_waits += 1
        return programs
