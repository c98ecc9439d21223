"""A call's price for its own code path having been away: µs per call, by op and by the time since it last ran.

Every microbenchmark state runs the op back to back, its kernel and dispatch code hot; a step runs each op kind once
per layer with other kernels between, and on a shared host a call then pays a cost of its own that does not grow
with its data (:mod:`collectors.ops.after_other_work`: on the 2-core AMD EPYC host gelu 128x256 took 25 µs warm
and 44 / 73 / 159 µs after 0.5 / 2 / 8 ms of other ops, 25 / 28 / 35 after the same time running gelu itself).

``collect ops`` on a CPU times, per op and implementation, the forward of its smallest config warm and after each
wait of other work (its run summary's ``"code_away"``). Per op and wait the penalty is ``after - warm`` (µs,
at least 0), the median over the platform's completed sweeps; between waits it is interpolated linearly from 0 at
0 µs, beyond the longest it keeps the longest's. Nothing is fitted. Reuse pricing (:mod:`simulator.timing`) adds to
each forward call the penalty of its op at the traced time since the previous forward call of the same op and
implementation ended (the first call of an iteration: since the last one of the iteration before). Backward calls
get none: their microbenchmark is an isolated ``autograd.grad``, whose engine code a step keeps hot, so it does
not measure the kernel's code away apart.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Iterable

from simulator.memory_phase import summary_field
from simulator.piecewise import linear


@dataclass(frozen=True)
class CodeAway:
    """Per 'op/implementation': penalties (µs) after ``waits_us`` (ascending, above 0)."""

    waits_us: tuple[float, ...]
    penalties: dict[str, tuple[float, ...]]
    sweeps: int

    def __call__(self, op: str, implementation: str | None, elapsed_us: float) -> float:
        """µs a forward call of ``op`` pays after ``elapsed_us`` away (0: unmeasured op, no time, none elapsed); an
        op of no named implementation (the trace names one for embedding lookups only) takes its 'torch' curve, or
        its only one."""
        curve = self.penalties.get(f"{op}/{implementation}")
        if curve is None and implementation is None:
            mine = [v for k, v in self.penalties.items() if k.split("/", 1)[0] == op]
            curve = self.penalties.get(f"{op}/torch") or (mine[0] if len(mine) == 1 else None)
        if curve is None or not elapsed_us == elapsed_us or elapsed_us <= 0:
            return 0.0
        return linear(elapsed_us, (0.0, *self.waits_us), (0.0, *curve))   # from 0 at 0 µs

    def label(self) -> str:
        """'34 ops, median 12 / 40 / 110 µs after 0.5 / 2 / 8 ms'."""
        columns = list(zip(*self.penalties.values()))
        medians = " / ".join(f"{statistics.median(c):.0f}" for c in columns)
        waits = " / ".join(f"{w / 1e3:g}" for w in self.waits_us)
        return f"{len(self.penalties)} ops, median {medians} µs after {waits} ms"

    def to_json(self) -> dict[str, Any]:
        return {"waits_us": list(self.waits_us), "sweeps": self.sweeps,
                "penalties": {k: [round(p, 2) for p in v] for k, v in sorted(self.penalties.items())}}


def entry_penalties(entry: Any) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """One op's ``code_away`` entry as (waits µs, penalties µs); None when missing or unusable."""
    if not isinstance(entry, dict):
        return None
    warm, waits, after = entry.get("warm_us"), entry.get("waits_us"), entry.get("after_us")
    if not (isinstance(warm, (int, float)) and isinstance(waits, list) and isinstance(after, list)
            and len(waits) == len(after) >= 1):
        return None
    try:
        waits_f = tuple(float(w) for w in waits)
        after_f = [float(a) for a in after]
    except (TypeError, ValueError):
        return None
    if waits_f[0] <= 0 or any(b <= a for a, b in zip(waits_f, waits_f[1:])) or not warm == warm:
        return None
    return waits_f, tuple(max(a - float(warm), 0.0) for a in after_f)


def from_summaries(summaries: Iterable[Any]) -> CodeAway | None:
    """The per-op, per-wait median penalty over the ``code_away`` entries of these sweep summaries."""
    per: dict[str, list[tuple[float, ...]]] = {}
    waits: tuple[float, ...] | None = None
    sweeps = 0
    for summary in summaries:
        used = False
        entries = summary_field(summary, "code_away")
        for key, entry in entries.items() if isinstance(entries, dict) else ():
            got = entry_penalties(entry)
            if got is None or (waits is not None and got[0] != waits):
                continue
            waits, used = got[0], True
            per.setdefault(key, []).append(got[1])
        sweeps += used
    if waits is None or not per:
        return None
    return CodeAway(waits, {k: tuple(float(statistics.median(col)) for col in zip(*rows)) for k, rows in per.items()},
                    sweeps)
