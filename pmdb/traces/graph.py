"""A rank's ops in execution order with their dependencies: the format-independent input of the simulator.

Built from stored traces (:mod:`pmdb.traces.from_store`) or by hand (tests). Times are microseconds (µs),
sizes bytes. Measured fields are NaN when the trace did not time them (ET-only ops).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Iterator

from pmdb.errors import PmdbError
from pmdb.platform import Semantics

NAN = math.nan


class Stream(IntEnum):
    """Where a kernel runs: the compute/memory stream (or, on a CPU, the calling thread) or the communication
    stream (on a CPU, the backend's communication thread)."""

    COMPUTE = 0
    COMM = 1


@dataclass(slots=True)
class Kernel:
    """One unit of device work launched by an op (a CUDA kernel, or on a CPU the op's own work)."""

    stream: Stream
    dur_us: float = NAN          # measured duration (what replay mode uses)
    name: str = ""
    launch_us: float = NAN       # measured duration of the launch call (this instance's T4)
    launch_name: str = ""        # launch API ('cudaLaunchKernel', 'cudaMemcpyAsync', ...)
    gap_before_us: float = NAN   # measured CPU time from the op start / previous launch end to this launch (T2 / T5),
                                 # without the host's waits for the device (``waits_before``)
    waits_before: tuple[Stream, ...] = ()  # streams the host waited for (a synchronize call) just before this launch


@dataclass(slots=True)
class Op:
    """One top-level op of a rank, in execution order.

    ``waits_on`` holds the indices (in the same rank's op list) of the collectives whose output this op reads
    (found through tensor storage ids); ``sync_streams`` the streams whose completion the host waits for after
    the op (a host sync such as ``.item()`` or ``cudaDeviceSynchronize``).
    """

    name: str
    kernels: list[Kernel] = field(default_factory=list)
    collective: str | None = None          # 'all_reduce', 'all_to_all', ... (None for compute/CPU ops)
    comm_bytes: float = NAN                # message size the collective model uses (bytes)
    waits_on: tuple[int, ...] = ()
    sync_streams: tuple[Stream, ...] = ()
    start_us: float = NAN                  # measured start (trace clock)
    cpu_dur_us: float = NAN                # measured wall time on the calling thread
    gap_before_us: float = NAN             # measured idle CPU time since the previous op ended (this instance's T1)
    tail_us: float = NAN                   # measured CPU time from the last launch end to the op end (T3)
    input_shapes: list[Any] = field(default_factory=list)
    input_types: list[Any] = field(default_factory=list)
    attrs: dict[str, Any] = field(default_factory=dict)
    children: list[tuple[str, list[Any]]] = field(default_factory=list)  # (name, input shapes) of nested ops
    op_id: int | None = None               # trace_ops.op_id it came from
    sub: list["Op"] = field(default_factory=list)  # direct child ops (built on request, for model mode on CPUs)
    phase: str = "fw"                      # training phase: fw, bw or optimizer (pmdb.traces.phases)
    step_range: str | None = None          # the optimizer range it runs in (pmdb.traces.phases.optimizer_range)
    reuse: tuple[tuple[float, ...], ...] = ()  # per input storage (reuse distance, bytes[, µs since]): traces.reuse
    zero_frac: float = 0.0                 # share of exact zeros in its input, when recorded (pmdb.traces.state_values)

    @property
    def is_collective(self) -> bool:
        return self.collective is not None

    def kernel_waits(self) -> tuple[tuple[int, ...], ...]:
        """Per kernel, the streams the host waited for before launching it (empty when no launch waited)."""
        if not any(k.waits_before for k in self.kernels):
            return ()
        return tuple(tuple(int(s) for s in k.waits_before) for k in self.kernels)


@dataclass(slots=True)
class RankGraph:
    """One rank's ops of one iteration, in execution order."""

    rank: int
    ops: list[Op]
    measured_us: float = NAN               # this rank's measured iteration time in the trace, when known
    iteration: int | None = None
    start_us: float = NAN                  # when this rank entered the iteration, on the trace clock
    tail_us: float = 0.0                   # measured CPU time from the last op's end to the iteration's end

    def collectives(self) -> list[int]:
        return [i for i, op in enumerate(self.ops) if op.is_collective]

    def drop_trailing_barriers(self) -> int:
        """Remove barriers after this rank's last other collective (the harness's step separators; an ET may parent
        one to the step on one rank and not on another); dependencies are renumbered. Returns how many went."""
        coll = self.collectives()
        gone = set()
        for i in reversed(coll):
            if self.ops[i].collective != "barrier":
                break
            gone.add(i)
        if not gone:
            return 0
        new_index = {old: k for k, old in enumerate(i for i in range(len(self.ops)) if i not in gone)}
        kept = [op for i, op in enumerate(self.ops) if i not in gone]
        for op in kept:
            op.waits_on = tuple(new_index[j] for j in op.waits_on if j in new_index)
        self.ops = kept
        return len(gone)

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return len(self.ops)


@dataclass(slots=True)
class TraceGraph:
    """All ranks of one iteration of a trace set, with the execution semantics of the platform it ran on."""

    ranks: list[RankGraph]
    semantics: Semantics                    # of the platform it ran on
    source_platform: str | None = None
    trace_set_id: int | None = None
    measured_us: float = NAN                # the iteration over all ranks: last entry to last exit (µs)

    def validate(self) -> "TraceGraph":
        """Check dependencies point backwards at collectives and every rank has the same collective sequence.
        Ranks whose sequences differ are first stripped of trailing barriers (:meth:`RankGraph.drop_trailing_barriers`:
        this mutates them), so that only a real difference is refused."""
        if not self.ranks:
            raise PmdbError("the trace set has no ranks to simulate")
        counts = {tuple(g.ops[i].collective for i in g.collectives()) for g in self.ranks}
        if len(counts) > 1:  # ranks that differ only by trailing barriers: those are outside the step
            for graph in self.ranks:
                graph.drop_trailing_barriers()
        sequences = []
        for graph in self.ranks:
            for i, op in enumerate(graph.ops):
                for j in op.waits_on:
                    if not (0 <= j < i) or not graph.ops[j].is_collective:
                        raise PmdbError(f"rank {graph.rank}: op {i} ({op.name}) depends on op {j}, "
                                        f"which is not an earlier collective")
            sequences.append([graph.ops[i].collective for i in graph.collectives()])
        for graph, seq in zip(self.ranks[1:], sequences[1:]):
            if seq != sequences[0]:
                raise PmdbError(f"rank {graph.rank} has collectives {_short(seq)} but rank {self.ranks[0].rank} "
                                f"has {_short(sequences[0])}: the ranks' traces are not of the same program step")
        return self


def _short(seq: list[str | None]) -> str:
    text = ", ".join(str(s) for s in seq[:6])
    return f"[{text}{', ...' if len(seq) > 6 else ''}] ({len(seq)})"
