"""Execution semantics: how one rank's CPU clock and stream fronts move (the per-rank rules of Algorithm 1).

Two platforms kinds, one interface:

* ``async_device`` (CUDA): the CPU thread launches kernels onto a compute and a communication stream and goes on;
  a kernel starts at ``max(stream front + 1 µs, cpu + T4/2)`` (paper Algorithm 1, line 21) and the CPU pays T4 per
  launch. An intra-rank sync (a consumer of a collective's output) aligns the two stream fronts; the CPU clock does
  not wait for it. A new collective waits for the compute queued before it, not the other way round.
* ``sync_host`` (CPU, e.g. gloo): compute ops run on the calling thread, so a compute "kernel" advances the CPU clock
  by its own duration; collectives run on the backend's communication thread, starting ``T4`` (the hand-over
  latency) after the launch, queued behind the collective still running, without blocking the caller. An
  intra-rank sync (a consumer of the last collective's output) makes the calling thread wait for it. Where the
  machine has no core to spare for the communication threads (``comm_shares_core``), a collective's work also takes
  its duration from the calling thread's core: it cannot overlap the rank's compute.

All times are µs. The state records every stream interval so that device-active time and overlap can be computed.

:data:`RULES_VERSION` numbers these rules: every prediction stores it (``predictions.rules_version``), and ``pmdb
predict --all`` makes a prediction made under other rules again. Bump it with any change that moves a predicted
time (here, or in how the engine applies these rules); ``tests/simulator/test_rules_version.py`` fails when this
file changes without it.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.traces.graph import Stream

# RULES_VERSION 1: sync-host collectives queue without blocking the caller; comm_shares_core charges the core;
# 2: an optimizer step's sqrt is priced at the zero share of the state it reads (pmdb.traces.state_values);
# 3: an embedding lookup whose exact tables were microbenchmarked is priced by that measurement (measured_shapes);
# 4: on a CPU, an embedding lookup whose exact tables were timed in a training loop ('loop') is priced by that
# 5: a host wait for work outside the trace (peers, other threads) stays: replay keeps a traced wait's part that the
#    rank's own work does not explain, model mode prices it (engine.TimedOp.traced_wait_us, external_us); on a GPU a
#    new collective waits for the compute stream, which no longer waits for it (AsyncDevice.collective_sync)
# 6: on a CPU the default prices each op by reuse distance in the LLC its run found, where the run (or the
#    platform's op sweeps) recorded it (simulator.llc_found); cold without
# 7: an op priced between its warm and cold timing by its cold share f takes (1-f) warm + f cold (the bytes' costs
#    add), not warm^(1-f) cold^f (simulator.cache_levels.between)
# 8: a bmm is priced in the operand layout its execution trace recorded (AT / BT: an operand stored transposed,
#    pmdb.traces.layout), not always row-major
# 9: on a CPU an optimizer range's own host time (Optimizer.step#...: Python before its first op and after its
#    last) is priced by its T2 and T3 as its ops enter and leave it (fitters.overheads.cpu_samples)
# 10: on a CPU an op priced by its own samples (T5 whole, or T2 + children + T5 gaps + T3) takes those of its input
#    size class where its overhead version sampled that class (fitters.overheads.size_class, migration 0020)
# 11: on a CPU rule 4 prices an embedding lookup's forward only; its backward, which a step runs long after the
#    forward (its 'loop' timing runs it right after), is priced by its warm and cold timings like any op
# 12: reuse distances count the accesses of an op with children (its own tensors no op below it touches: an fbgemm
#    kernel's tables, an in-place mul_ whose only child converts its scalar), and an op priced whole reads what its
#    descendants read from outside it (an autograd node: the weights and activations the forward saved)
#    (pmdb.traces.reuse)
# 13: reuse pricing scales the bytes an op finds in L2 and in the LLC by what those levels keep after the traced time
#    since the operand's last access, where the run's (or the platform's op sweeps') memory probes measured how the
#    caches decay over time (simulator.cache_decay; pmdb.traces.reuse's elapsed µs)
# 14: reuse pricing adds to each forward call of the forward phase what its code path away costs, at the traced time
#    since the previous forward call of its op ended, where the platform's op sweeps timed it (simulator.code_away)
# 15: rule 8 on a GPU too: a bmm backward node's layout, read from the gradient GEMMs nested in it, was built only
#    for graphs loaded with every nested op (CPUs, `collect mine-traces`), so a GPU prediction priced it row-major
#    and missed its mined rows (pmdb.traces.opmap.needs_nested_ops); CPU predictions are unchanged
# 16: a graph that timed no kernel (a shape-only capture) predicted on a GPU prices an op no model maps by the
#    roofline of the target's peaks over the rows it moves (gathers, scatters, fills, reductions: a mixture-of-
#    experts router and expert loop), not at no device time (pmdb.traces.opmap.untimed_work); an eval-mode dropout
#    (an inference call) costs no device time; traced graphs and CPU predictions are unchanged
RULES_VERSION = 16

COMPUTE = int(Stream.COMPUTE)
COMM = int(Stream.COMM)


@dataclass(slots=True)
class RankState:
    """One rank's clocks (µs): the CPU thread, the stream fronts, busy intervals and summed kernel times."""

    cpu: float = 0.0
    fronts: list[float] = field(default_factory=lambda: [0.0, 0.0])
    starts: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    ends: tuple[list[float], list[float]] = field(default_factory=lambda: ([], []))
    kernel_sum: list[float] = field(default_factory=lambda: [0.0, 0.0])
    last_comm: int | None = None
    waited: float = 0.0        # the current op's simulated host waits so far
    external_us: float = 0.0   # waits for work outside the trace (engine.TimedOp.traced_wait_us, external_us)
    externals: int = 0

    def record(self, stream: int, start: float, dur: float) -> None:
        end = start + dur
        self.fronts[stream] = end
        self.starts[stream].append(start)
        self.ends[stream].append(end)
        self.kernel_sum[stream] += dur

    def set_comm_end(self, end: float) -> None:
        """Inter-rank sync: the communication stream is occupied until the collective ends on every rank."""
        self.fronts[COMM] = end
        if self.ends[COMM]:
            self.ends[COMM][-1] = end

    def host_wait(self, streams: tuple[int, ...]) -> None:
        """A host sync: the CPU clock moves to the front of the given streams."""
        for s in streams:
            if self.fronts[s] > self.cpu:
                self.cpu = self.fronts[s]


class AsyncDevice:
    """CUDA-like semantics (paper Algorithm 1 as written)."""

    name = Semantics.ASYNC_DEVICE
    kernel_gap_us = 1.0  # minimum gap between consecutive kernels on one stream (Algorithm 1, line 21)

    def intra_sync(self, s: RankState) -> None:
        front = max(s.fronts)
        s.fronts[COMPUTE] = s.fronts[COMM] = front

    def collective_sync(self, s: RankState) -> None:
        """A new collective waits for the work queued before it (NCCL's stream waits on an event of the compute
        stream); the compute stream goes on. Algorithm 1 (lines 12–15) aligns both fronts here, which makes compute
        wait for every earlier collective: a rank whose communicators run beside its compute (a 16-rank job's
        all_reduce still running while the next step starts) was replayed 5% too slow. Compute waits for a
        collective where the program waits for it: a consumer of its output (``intra_sync``) or a host sync."""
        s.fronts[COMM] = max(s.fronts[COMM], s.fronts[COMPUTE])

    def kernel(self, s: RankState, stream: int, dur: float, t4: float) -> None:
        start = max(s.fronts[stream] + self.kernel_gap_us, s.cpu + t4 / 2.0)
        s.record(stream, start, dur)
        s.cpu += t4


class SyncHost:
    """CPU semantics: compute on the calling thread, collectives on a communication thread."""

    name = Semantics.SYNC_HOST
    kernel_gap_us = 0.0

    def __init__(self, comm_shares_core: bool = False):
        self.comm_shares_core = comm_shares_core

    def intra_sync(self, s: RankState) -> None:
        front = max(s.cpu, s.fronts[COMPUTE], s.fronts[COMM])
        s.cpu = s.fronts[COMPUTE] = s.fronts[COMM] = front

    def collective_sync(self, s: RankState) -> None:
        """A new collective does not block the caller: the backend queues it behind the running one (its start
        is max(communication front, launch) in :meth:`kernel`). Traces of DDP on gloo show the next bucket's
        all_reduce launched while the previous one still runs."""

    def kernel(self, s: RankState, stream: int, dur: float, t4: float) -> None:
        if stream == COMPUTE:
            start = max(s.cpu, s.fronts[COMPUTE])
            s.record(COMPUTE, start, dur)
            s.cpu = start + dur
        else:
            start = max(s.fronts[COMM], s.cpu + t4)
            s.record(COMM, start, dur)
            if self.comm_shares_core:   # the rank's only core runs the collective's work too
                s.cpu += dur


def get(semantics: Semantics | str, comm_shares_core: bool = False) -> AsyncDevice | SyncHost:
    """The rules of a platform's execution semantics (``comm_shares_core``: sync_host only, see :class:`SyncHost`)."""
    try:
        kind = Semantics(semantics)
    except ValueError:
        raise PmdbError(f"unknown execution semantics {semantics!r} (known: {', '.join(Semantics)})") from None
    return SyncHost(comm_shares_core) if kind is Semantics.SYNC_HOST else AsyncDevice()
