"""Algorithm 1 (paper §III-D, method.md §7) over all ranks in lockstep in one process.

Each rank is advanced to its next collective (the op's launch part: intra-rank sync, T1, T2, kernels); when every
rank is there, the communication fronts are synchronised to their maximum (inter-rank sync) and every rank finishes
the op (T3) and goes on. No processes, no MPI. Input: per rank, a list of :class:`TimedOp` (times in µs).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from pmdb.errors import PmdbError
from simulator.semantics import COMM, COMPUTE, AsyncDevice, RankState, SyncHost


@dataclass(slots=True)
class TimedOp:
    """An op with every time resolved (µs).

    ``kernels`` are ``(stream, duration, T4, cpu_before)`` where ``cpu_before`` is the CPU time spent before that
    launch (T2 for the first kernel, T5 between kernels). ``t3`` follows the last launch; an op without kernels
    costs ``cpu_us`` instead (T5 in the paper's notation, its whole CPU time). A collective ends on every rank when
    it ends on the slowest one, unless ``after_last_us`` gives this rank's own end: that long after the last rank's
    collective started (replay: each rank's measured completion).
    """

    t1: float = 0.0
    t3: float = 0.0
    cpu_us: float = 0.0
    kernels: tuple[tuple[int, float, float, float], ...] = ()
    is_collective: bool = False
    waits_on: tuple[int, ...] = ()
    sync_streams: tuple[int, ...] = ()
    after_last_us: float | None = None
    kernel_waits: tuple[tuple[int, ...], ...] = ()  # per kernel, streams the host waits for before its launch
    traced_wait_us: float | None = None  # replay: the op's host waits as traced; what the rank's simulated work
    # does not explain (beyond EXTERNAL_MIN_US) stays, as an external wait after the op's last host wait
    external_us: float = 0.0  # model mode: a wait for work outside the trace (peers, other threads), priced apart
    external_by: str = ""     # what priced ``external_us`` (a collective model version, or the traced wait)


EXTERNAL_MIN_US = 50.0  # a traced wait longer than the simulated one by less is clock noise, not a wait for peers


@dataclass(slots=True)
class RankResult:
    """Per-rank outcome (µs)."""

    rank: int
    predicted_us: float                 # max(CPU clock, compute front, communication front)
    cpu_us: float                       # CPU clock at the end
    compute_front_us: float
    comm_front_us: float
    compute_busy_us: float              # union of compute-stream intervals
    comm_busy_us: float                 # union of communication-stream intervals (includes waiting for peers)
    device_active_us: float             # union of both streams' intervals
    comm_unoverlapped_us: float         # time only the communication stream is busy
    compute_kernel_us: float            # summed compute kernel times
    comm_kernel_us: float               # summed communication kernel times
    baseline_us: float                  # max over streams of summed kernel time
    ops: int = 0
    external_wait_us: float = 0.0       # host waits for work outside the trace (peers, other threads)
    external_waits: int = 0             # how many ops waited so

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__slots__}


@dataclass(slots=True)
class OpSpan:
    """Where the engine put one op of a rank (µs from the iteration's start; filled only when :func:`simulate` is
    given a :class:`Timeline`). ``arrive`` → ``synced``: the calling thread waits for a collective (intra-rank
    sync); ``synced`` → ``begin``: T1; ``begin`` → ``end``: the op on the calling thread. ``kernels`` are
    ``(stream, start, end, own duration)`` in the op's order (a collective's end includes waiting for its peers),
    ``host_waits`` the calling thread's waits for streams inside the op, ``external_waits`` its waits for work
    outside the trace (:attr:`TimedOp.traced_wait_us`, :attr:`TimedOp.external_us`), ``stream_waits``
    ``(stream, from, to)``:
    a stream held idle by the sync before the op (async devices align both streams' fronts)."""

    index: int
    arrive: float
    synced: float = 0.0
    begin: float = 0.0
    end: float = 0.0
    kernels: list[tuple[int, float, float, float]] = field(default_factory=list)
    host_waits: list[tuple[float, float]] = field(default_factory=list)
    external_waits: list[tuple[float, float]] = field(default_factory=list)  # waits for work outside the trace
    stream_waits: list[tuple[int, float, float]] = field(default_factory=list)
    stream_waits_from: tuple[float, ...] = ()   # the stream fronts when the op's turn came


@dataclass(slots=True)
class Timeline:
    """Per rank, every op's :class:`OpSpan` in program order (``simulate(..., timeline=Timeline())``). Recording
    is opt-in: without it the engine keeps no per-op record."""

    ranks: list[list[OpSpan]] = field(default_factory=list)


@dataclass(slots=True)
class SimResult:
    """The iteration: maxima over ranks, and the per-rank details."""

    ranks: list[RankResult] = field(default_factory=list)

    @property
    def predicted_us(self) -> float:
        return max(r.predicted_us for r in self.ranks)

    @property
    def device_active_us(self) -> float:
        return max(r.device_active_us for r in self.ranks)

    @property
    def baseline_us(self) -> float:
        return max(r.baseline_us for r in self.ranks)

    @property
    def critical_rank(self) -> RankResult:
        return max(self.ranks, key=lambda r: r.predicted_us)

    @property
    def comm_unoverlapped_frac(self) -> float:
        """Share of the critical rank's iteration during which only communication runs."""
        crit = self.critical_rank
        return crit.comm_unoverlapped_us / crit.predicted_us if crit.predicted_us > 0 else 0.0


def _launch(state: RankState, op: TimedOp, sem: AsyncDevice | SyncHost, span: OpSpan | None = None) -> None:
    """Algorithm 1 lines 12–27: intra-rank sync, T1, then T2/T5 and T4 around each kernel (up to the inter-rank
    sync). ``span`` (optional, made by :func:`_advance_recorded`) records where the op went."""
    if state.last_comm is not None and state.last_comm in op.waits_on:
        sem.intra_sync(state)
        state.last_comm = None
    elif op.is_collective:
        sem.collective_sync(state)
        state.last_comm = None
    if span is not None:
        span.synced, span.begin = state.cpu, state.cpu + op.t1
        span.stream_waits = [(s, front, state.fronts[s]) for s, front in enumerate(span.stream_waits_from)
                             if state.fronts[s] > front]
    state.cpu += op.t1
    state.waited = 0.0
    if op.kernel_waits:   # a synchronize call between launches: the host waits there, not after the op
        last = -1 if op.sync_streams else max(j for j, w in enumerate(op.kernel_waits) if w)
        for j, ((stream, dur, t4, before), waits) in enumerate(zip(op.kernels, op.kernel_waits)):
            if waits:
                waited = state.cpu
                state.host_wait(waits)
                state.waited += state.cpu - waited
                if span is not None and state.cpu > waited:
                    span.host_waits.append((waited, state.cpu))
                if j == last:
                    _external(state, op, span)
            state.cpu += before
            sem.kernel(state, stream, dur, t4)
        return
    for stream, dur, t4, before in op.kernels:
        state.cpu += before
        sem.kernel(state, stream, dur, t4)


def _finish(state: RankState, op: TimedOp, index: int, span: OpSpan | None = None) -> None:
    """Algorithm 1 lines 32–38 plus host syncs: T3 (or the CPU time of an op without kernels)."""
    state.cpu += op.t3 if op.kernels else op.cpu_us
    if op.sync_streams:
        waited = state.cpu
        state.host_wait(op.sync_streams)
        state.waited += state.cpu - waited
        if span is not None and state.cpu > waited:
            span.host_waits.append((waited, state.cpu))
        _external(state, op, span)
    elif not op.kernel_waits and op.external_us > 0:
        _external(state, op, span)
    if op.is_collective:
        state.last_comm = index


def _external(state: RankState, op: TimedOp, span: OpSpan | None) -> None:
    """After an op's last host wait: the part of its traced wait that the rank's simulated work does not explain
    (replay), or its priced wait for work outside the trace (model mode), keeps the calling thread waiting."""
    extra = op.external_us
    if op.traced_wait_us is not None and op.traced_wait_us - state.waited > EXTERNAL_MIN_US:
        extra += op.traced_wait_us - state.waited
    if extra <= 0:
        return
    if span is not None:
        span.external_waits.append((state.cpu, state.cpu + extra))
    state.cpu += extra
    state.external_us += extra
    state.externals += 1


def _advance(ops: Sequence[TimedOp], start: int, state: RankState, sem: AsyncDevice | SyncHost) -> int:
    """Run ops from ``start`` up to and including the launch part of the next collective; its index (or len)."""
    for i in range(start, len(ops)):
        op = ops[i]
        _launch(state, op, sem)
        if op.is_collective:
            return i
        _finish(state, op, i)
    return len(ops)


def _advance_recorded(ops: Sequence[TimedOp], start: int, state: RankState, sem: AsyncDevice | SyncHost,
                      spans: list[OpSpan]) -> int:
    """:func:`_advance`, appending each op's :class:`OpSpan` to ``spans`` (a loop of its own: prediction without
    a timeline pays nothing for it)."""
    for i in range(start, len(ops)):
        op = ops[i]
        span = OpSpan(i, state.cpu, stream_waits_from=tuple(state.fronts))
        spans.append(span)
        _launch(state, op, sem, span)
        if op.is_collective:
            return i
        _finish(state, op, i, span)
        span.end = state.cpu
    return len(ops)


def simulate(programs: Sequence[Sequence[TimedOp]], sem: AsyncDevice | SyncHost,
             timeline: Timeline | None = None) -> SimResult:
    """Predict one iteration of all ranks; ``programs[r]`` is rank r's ops in execution order. With ``timeline``,
    every op's place is recorded in it (:class:`OpSpan`)."""
    if not programs:
        raise PmdbError("nothing to simulate: no ranks")
    states = [RankState() for _ in programs]
    spans: list[list[OpSpan] | None] = [[] if timeline is not None else None for _ in programs]
    pos = [0] * len(programs)
    while True:
        at = [_advance(ops, p, st, sem) if sp is None else _advance_recorded(ops, p, st, sem, sp)
              for ops, p, st, sp in zip(programs, pos, states, spans)]
        done = [a == len(ops) for a, ops in zip(at, programs)]
        if all(done):
            break
        if any(done):
            late = [r for r, d in enumerate(done) if not d]
            raise PmdbError(f"ranks {late} wait in a collective that ranks "
                            f"{[r for r, d in enumerate(done) if d]} never reach: collective counts differ")
        end = max(st.fronts[COMM] for st in states)          # inter-rank sync (Algorithm 1, lines 29–31)
        last_start = max((st.starts[COMM][-1] for st in states if st.starts[COMM]), default=0.0)
        for ops, a, st, sp in zip(programs, at, states, spans):
            own = ops[a].after_last_us
            st.set_comm_end(end if own is None else last_start + own)
            if sp is None:
                _finish(st, ops[a], a)
            else:
                _finish(st, ops[a], a, sp[-1])
                sp[-1].end = st.cpu
        pos = [a + 1 for a in at]
    if timeline is not None:
        timeline.ranks = [_place_kernels(ops, st, sp) for ops, st, sp in zip(programs, states, spans)]
    return SimResult([_rank_result(r, st, len(ops)) for r, (st, ops) in enumerate(zip(states, programs))])


def _place_kernels(ops: Sequence[TimedOp], state: RankState, spans: list[OpSpan]) -> list[OpSpan]:
    """Each span's kernels from the rank's stream intervals (recorded in launch order, final after the
    inter-rank syncs)."""
    cursor = [0, 0]
    for span in spans:
        for stream, dur, _, _ in ops[span.index].kernels:
            k = cursor[stream]
            cursor[stream] += 1
            span.kernels.append((stream, state.starts[stream][k], state.ends[stream][k], dur))
    return spans


def _union(starts: list[float], ends: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Merged disjoint intervals of possibly overlapping ones."""
    if not starts:
        return np.empty(0), np.empty(0)
    s = np.asarray(starts, dtype=float)
    e = np.asarray(ends, dtype=float)
    order = np.argsort(s, kind="stable")
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, len(s) - 1]
    return s[first], e[last]


def _length(starts: np.ndarray, ends: np.ndarray) -> float:
    return float(np.sum(ends - starts)) if len(starts) else 0.0


def _rank_result(rank: int, st: RankState, n_ops: int) -> RankResult:
    cs, ce = _union(st.starts[COMPUTE], st.ends[COMPUTE])
    ms, me = _union(st.starts[COMM], st.ends[COMM])
    all_s, all_e = _union(list(cs) + list(ms), list(ce) + list(me))
    compute_busy, comm_busy, active = _length(cs, ce), _length(ms, me), _length(all_s, all_e)
    return RankResult(
        rank=rank, predicted_us=max(st.cpu, *st.fronts), cpu_us=st.cpu,
        compute_front_us=st.fronts[COMPUTE], comm_front_us=st.fronts[COMM],
        compute_busy_us=compute_busy, comm_busy_us=comm_busy, device_active_us=active,
        comm_unoverlapped_us=active - compute_busy,
        compute_kernel_us=st.kernel_sum[COMPUTE], comm_kernel_us=st.kernel_sum[COMM],
        baseline_us=max(st.kernel_sum), ops=n_ops, external_wait_us=st.external_us, external_waits=st.externals)


def repeat(programs: Sequence[Sequence[TimedOp]], times: int) -> list[list[TimedOp]]:
    """Each rank's program run ``times`` times back to back (dependencies shifted to their own repetition)."""
    out = []
    for ops in programs:
        n = len(ops)
        rank = list(ops)
        for k in range(1, times):
            for op in ops:
                if op.waits_on:
                    op = replace(op, waits_on=tuple(j + k * n for j in op.waits_on))
                rank.append(op)
        out.append(rank)
    return out


def steady_period(programs: Sequence[Sequence[TimedOp]], sem: AsyncDevice | SyncHost,
                  single: SimResult | None = None) -> float:
    """Steady-state iteration time (µs): two back-to-back iterations minus one. The next iteration's CPU work
    overlaps the previous one's device backlog as in a training loop, which a single iteration from an idle
    machine (Algorithm 1's T) cannot show."""
    single = single or simulate(programs, sem)
    return simulate(repeat(programs, 2), sem).predicted_us - single.predicted_us
