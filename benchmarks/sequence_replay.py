"""A step's calls replayed outside the model: how much of an op's in-step time each cache state explains (µs).

Diagnosis for #36: `in_context_ops.py` found the forward's ops 1.5-3x their prices inside the step.
This takes one training step's forward + loss apart. Its top-level torch calls are recorded once (a
:class:`torch.overrides.TorchFunctionMode`; the real tensors and arguments), after the trainer's warm-up, then timed:

* **real**: the model's own forward + loss, unprofiled, one step after another (training mode: dropout on);
* **in sequence**: the recorded calls replayed back to back in program order, without the modules' Python between
  them, each call timed; the outputs are kept until the replay ends, as autograd keeps a step's activations;
* **alone**: each call by itself in four states, alternating call by call:
  1. *warm*: right after an untimed call of its own (its operands, its output's buffer and its code in cache);
  2. *inputs flushed*: pmdb's cold state (`collectors.ops.timer`): the lines of the call's tensor arguments evicted
     (:mod:`collectors.ops.cache_evict`), then the dispatch path re-warmed on 4-element tensors;
  3. *+ output flushed*: the buffer the previous call's output sat in evicted too (the allocator hands it out again);
  4. *+ code cold*: as 3, but ~28 distinct tiny ops (sin, sort, conv1d, embedding, ...) run instead of the re-warm, so
     the dispatch path is warm and the op's own kernel code is not, as after the other ops of a layer;
  5. *after the call before it*: nothing evicted; the recorded call that precedes it in program order runs
     (untimed), then it: what its immediate predecessor leaves (caches, predictors, the core's state);
  6. *after the 4 calls before it*: the same with the four calls before it. A phase's first calls have fewer
     (the first none).
  If 5 or 6 comes near *in sequence* where 1-4 do not, what a call loses in sequence is set by the few calls just
  before it. Each of them could then be timed in a microbenchmark as a pair with its predecessor. States 2-4 need
  the eviction helper; without it only 1, 5 and 6 run.

The backward is taken apart the same way one level down: the aten ops the autograd engine runs for
``loss.backward()`` are recorded (a :class:`torch.utils._python_dispatch.TorchDispatchMode`) and replayed in
sequence and alone. Its replay calls each aten op from Python, which the engine does from C++, so its whole replay
runs longer than the real backward by that per-op call cost (a few µs each); the per-op comparisons are like for like.

Each round runs one real step, one replay of each phase and every call alone once per state, so the host's slow
and fast phases (`host_two_speeds_*.md`) fall on all of them alike; medians over the rounds. What the states do not
reach (in sequence minus state 4) follows from the order of the ops themselves (candidates: the host's vector
wake-up, `vector_idle_*.md`; lines the previous ops left dirty; predictors trained on the previous op).
Real minus in sequence is the modules' Python between the calls. Per single-rank transformer or DLRM
run of a workspace (its stored config) with a model-mode prediction: the sums per state, per op name beside the
predicted price (the exported timeline's top-level forward ops), and the GEMMs call by call.

Diagnosis only: nothing is fitted on it and no prediction rule is chosen by it. One thread, pmdb's allocator
settings (as `collect workload`). Replaying re-runs in-place calls on the recorded tensors (their values drift,
their sizes do not). Each timeline export stores one more prediction in the workspace.

    .venv/bin/python benchmarks/sequence_replay.py pmdb-workspace [--rounds 40] [--out FILE.md (appended to)]
"""
from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from host_op_diagnosis import trainer_of  # noqa: E402
from in_context_ops import (GEMMS, begin, name_of, outermost_mode, predicted_ops, predicted_runs,  # noqa: E402
                            short, tensors_in)
from pmdb_commands import emit  # noqa: E402

STATES = ("warm", "inputs flushed", "+ output flushed", "+ code cold", "after the call before it",
          "after the 4 calls before it")
EVICTING = STATES[1:4]                     # the states that need the eviction helper
BEFORE = {STATES[4]: 1, STATES[5]: 4}      # state -> how many of the preceding calls run before the timed one
FAMILIES = ("dlrm", "transformer")
FORWARD, BACKWARD = "forward + loss", "backward"
# per phase: the predicted timeline's phases it covers, what its recorded calls are, whether they carry op prices
# (the backward is priced per autograd node, its calls are aten ops)
PHASES = {FORWARD: (("fw", "loss"), "top-level calls", True),
          BACKWARD: (("bw",), "aten ops (autograd nodes priced)", False)}


def forward_of(family: str, trainer: Any, batch: Any) -> Callable[[], Any]:
    """The forward + loss of one batch, as `collect workload`'s trainer of ``family`` runs it."""
    if family == "dlrm":
        return lambda: trainer.loss(trainer.model(batch.dense, batch.indices, batch.offsets), batch.labels)
    return lambda: trainer.model(**batch).loss


class Call:
    """One recorded top-level torch call: the function, its real arguments, its short name."""

    __slots__ = ("func", "args", "kwargs", "name")

    def __init__(self, func: Any, args: tuple, kwargs: dict, name: str) -> None:
        self.func, self.args, self.kwargs, self.name = func, args, kwargs, name

    def __call__(self) -> Any:
        return self.func(*self.args, **self.kwargs)


def record_forward(run_forward: Callable[[], Any]) -> tuple[list[Call], Any]:
    """The outermost torch calls ``run_forward`` makes, in order (nested calls run untimed inside them), and what it
    returned."""
    calls: list[Call] = []
    with outermost_mode(lambda func, args, kwargs, us: calls.append(Call(func, args, kwargs, short(name_of(func))))):
        result = run_forward()
    return calls, result


def record_backward(loss: Any) -> list[Call]:
    """The aten ops ``loss.backward()`` runs on this thread, in order, with their real arguments (a
    :class:`torch.utils._python_dispatch.TorchDispatchMode`: what the autograd engine calls, below autograd)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    calls: list[Call] = []

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            calls.append(Call(func, args, kwargs, short(getattr(func, "overloadpacket", func).__name__)))
            return func(*args, **kwargs)

    with Recorder():
        loss.backward()
    return calls


class Phase:
    """One phase's times over the rounds: its calls, the real phase's µs, each replay's total µs, the in-sequence
    per-call medians µs, and each state's per-call medians µs."""

    def __init__(self, calls: list[Call], real: list[float], totals: list[float], sequence: list[float],
                 medians: dict[str, list[float]]) -> None:
        self.calls, self.real, self.totals, self.sequence, self.medians = calls, real, totals, sequence, medians


def replay_once(calls: list[Call]) -> tuple[list[float], float]:
    """The calls replayed back to back once, outputs kept until the replay ends: (each call's µs, the total µs)."""
    per: list[float] = []
    outs = []
    begun = time.perf_counter_ns()
    for call in calls:
        start = time.perf_counter_ns()
        outs.append(call())
        per.append((time.perf_counter_ns() - start) / 1e3)
    total = (time.perf_counter_ns() - begun) / 1e3
    del outs
    return per, total


def _storages(value: Any) -> list[tuple[int, int]]:
    """(address, bytes) of each CPU storage behind the tensors of ``value`` (a tensor, or nested tuples, lists and
    dicts of them), each storage once."""
    from collectors.ops.cache_evict import storage_ranges

    return storage_ranges(tensors_in(value))


def tiny_ops() -> list[Callable[[], Any]]:
    """~28 distinct ops on 8-element tensors: they run the dispatch path and push other ops' kernel code out of the
    instruction caches, while touching almost no data."""
    import torch
    import torch.nn.functional as F

    t = torch.rand(8, 8) + 0.5
    i = torch.randint(0, 8, (8,))
    c, k = torch.rand(1, 2, 8), torch.rand(2, 2, 3)
    return [t.sin, t.cos, t.exp, t.log, lambda: t.softmax(-1), lambda: t.cumsum(0), t.sort, lambda: t.topk(2),
            lambda: F.conv1d(c, k), t.sigmoid, t.tanh, t.erf, t.sqrt, lambda: t[i], lambda: t.max(0), t.argmax,
            lambda: torch.cat([t, t]), t.norm, lambda: t.var(0), lambda: t.t().contiguous(),
            lambda: t.clamp(0.1, 0.9), lambda: t.pow(3), lambda: t.where(t > 0.7, 0.0),
            lambda: F.layer_norm(t, (8,)), lambda: F.gelu(t), lambda: t @ t, lambda: F.embedding(i, t),
            lambda: F.dropout(t, 0.1)]


class Alone:
    """Each call by itself in every state of :data:`STATES` (only ``warm`` without the eviction helper): one
    :meth:`round` times every call once per state, the states alternating call by call."""

    def __init__(self, calls: list[Call]) -> None:
        from collectors.ops import cache_evict
        from collectors.ops.timer import CacheFlusher

        self.calls = calls
        self.evictor = cache_evict.load()
        self.states = STATES if self.evictor is not None else tuple(s for s in STATES if s not in EVICTING)
        self.operands = [_storages((c.args, c.kwargs)) if self.evictor is not None else [] for c in calls]
        self.last: list[list[tuple[int, int]]] = []
        for call in calls:
            out = call()
            self.last.append(_storages(out))
            del out
        self.flusher = CacheFlusher(evict=False)   # only its rewarm: the dispatch path pmdb's cold state re-warms
        self.scatter = tiny_ops()

    def rewarm(self) -> None:
        """:meth:`collectors.ops.timer.CacheFlusher.rewarm`, as pmdb's cold state runs it after a flush."""
        import torch

        with torch.enable_grad():   # a backward's ops replay with grad mode off
            self.flusher.rewarm()

    def scattered(self) -> None:
        for op in self.scatter:
            op()

    def round(self) -> dict[str, list[float]]:
        """{state: each call's µs}, one call per state and recorded call."""
        times: dict[str, list[float]] = {state: [] for state in self.states}
        for k, call in enumerate(self.calls):
            for state in self.states:
                if state == "warm":            # just run: its operands, output buffer and code in cache
                    out = call()
                    del out
                elif state in BEFORE:          # the calls before it in program order, nothing evicted
                    for before in self.calls[max(0, k - BEFORE[state]):k]:
                        out = before()
                        del out
                else:
                    self.evictor.evict(self.operands[k])
                    if state != "inputs flushed":
                        self.evictor.evict(self.last[k])
                    (self.scattered if state == "+ code cold" else self.rewarm)()
                start = time.perf_counter_ns()
                out = call()
                times[state].append((time.perf_counter_ns() - start) / 1e3)
                self.last[k] = _storages(out)
                del out
        return times


def real_step(family: str, trainer: Any, batch: Any) -> tuple[float, float]:
    """One whole training step of ``batch``: its forward + loss and its backward, µs each."""
    forward = forward_of(family, trainer, batch)
    trainer.optimizer.zero_grad()
    begun = time.perf_counter_ns()
    loss = forward()
    middle = time.perf_counter_ns()
    loss.backward()
    ended = time.perf_counter_ns()
    trainer.optimizer.step()
    return (middle - begun) / 1e3, (ended - middle) / 1e3


def state_lines(real: list[float], totals: list[float], sequence: list[float],
                medians: dict[str, list[float]], what: str = FORWARD) -> list[str]:
    """Sums per state (ms), against warm, with the share of the warm-to-sequence gap each state closes."""
    seq = sum(sequence)
    warm = sum(medians["warm"])
    lines = ["| how the calls ran | ms | x warm | share of the gap warm -> in sequence closed |", "|---|---|---|---|"]
    for state, values in medians.items():
        total = sum(values)
        share = (total - warm) / (seq - warm) if seq > warm else float("nan")
        lines.append(f"| alone, {state} (sum of per-call medians) | {total / 1e3:.2f} | x{total / warm:.2f} | "
                     f"{share:.0%} |")
    lines.append(f"| in sequence (sum of per-call medians) | {seq / 1e3:.2f} | x{seq / warm:.2f} | 100% |")
    lines.append(f"| in sequence (whole replay, median of {len(totals)}) | {statistics.median(totals) / 1e3:.2f} | "
                 f"x{statistics.median(totals) / warm:.2f} | - |")
    lines.append(f"| the real {what} (median of {len(real)}) | {statistics.median(real) / 1e3:.2f} | "
                 f"x{statistics.median(real) / warm:.2f} | - |")
    return lines + [""]


def op_lines(calls: list[Call], sequence: list[float], medians: dict[str, list[float]],
             predicted: list[tuple[str, float, float]] | None, top: int) -> list[str]:
    """Per op name, the largest in-sequence times first: calls, predicted price ('-' without ``predicted``: the
    backward is priced per autograd node, not per aten op), each state's sum, in sequence."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for k, call in enumerate(calls):
        row = sums[call.name]
        row["calls"] += 1
        row["seq"] += sequence[k]
        for state, values in medians.items():
            row[state] += values[k]
    for name, us, _ in predicted or []:
        sums[name]["predicted"] += us
    states = list(medians)
    lines = ["| op | calls | predicted µs | " + " | ".join(f"{s} µs" for s in states) + " | in sequence µs | "
             "in sequence / last state |", "|---|---|---|" + "---|" * len(states) + "---|---|"]
    ranked = sorted((kv for kv in sums.items() if kv[1]["calls"]), key=lambda kv: -kv[1]["seq"])[:top]
    for name, row in ranked:
        last = row[states[-1]]
        price = f"{row['predicted']:.0f}" if predicted is not None else "-"
        lines.append(f"| {name} | {row['calls']:.0f} | {price} | "
                     + " | ".join(f"{row[s]:.0f}" for s in states)
                     + f" | {row['seq']:.0f} | " + (f"x{row['seq'] / last:.2f}" if last > 0 else "-") + " |")
    return lines + [""]


def gemm_lines(calls: list[Call], sequence: list[float], medians: dict[str, list[float]]) -> list[str]:
    """The GEMMs call by call: the last state's time, in sequence, and the calls since the previous GEMM."""
    last_state = list(medians)[-1]
    lines = [f"| # | GEMM | {last_state} µs | in sequence µs | difference µs | in-sequence µs of the calls since "
             "the previous GEMM |", "|---|---|---|---|---|---|"]
    since, n = 0.0, 0
    for k, call in enumerate(calls):
        if call.name in GEMMS:
            a, s = medians[last_state][k], sequence[k]
            lines.append(f"| {n} | {call.name} | {a:.0f} | {s:.0f} | {s - a:+.0f} | {since:.0f} |")
            since, n = 0.0, n + 1
        else:
            since += sequence[k]
    return lines + [""]


def measure_run(family: str, config: dict, batch_size: int, rounds: int) -> dict[str, Phase]:
    """The forward + loss (top-level torch calls) and the backward (aten ops) of one stored config of ``family`` in
    training mode, each as a :class:`Phase`. Each round runs one real step, one replay of each phase and one
    :meth:`Alone.round` of each, so the host's slow and fast phases fall on all of them alike."""
    import torch

    trainer, ids = trainer_of(family, config, batch_size, rounds)
    trainer.model.train(True)
    trainer.optimizer.zero_grad()
    forward, loss = record_forward(forward_of(family, trainer, trainer.batches[ids[0]]))
    backward = record_backward(loss)
    trainer.optimizer.step()
    recorded = {FORWARD: forward, BACKWARD: backward}

    def mode(name: str) -> Any:   # the engine runs a backward's ops with grad mode off
        return torch.no_grad() if name == BACKWARD else contextlib.nullcontext()

    alone = {}
    for name, calls in recorded.items():
        with mode(name):
            alone[name] = Alone(calls)
    real: dict[str, list[float]] = {name: [] for name in recorded}
    totals: dict[str, list[float]] = {name: [] for name in recorded}
    per: dict[str, list[list[float]]] = {name: [] for name in recorded}
    states = {name: {state: [] for state in alone[name].states} for name in recorded}
    for k in range(rounds):
        for name, us in zip(recorded, real_step(family, trainer, trainer.batches[ids[k % len(ids)]])):
            real[name].append(us)
        for name, calls in recorded.items():
            with mode(name):
                times, total = replay_once(calls)
                rounded = alone[name].round()
            per[name].append(times)
            totals[name].append(total)
            for state, values in rounded.items():
                states[name][state].append(values)

    def column(rows: list[list[float]]) -> list[float]:
        return [statistics.median(r[i] for r in rows) for i in range(len(rows[0]))] if rows else []

    return {name: Phase(calls, real[name], totals[name], column(per[name]),
                        {state: column(rows) for state, rows in states[name].items()})
            for name, calls in recorded.items()}


def main() -> None:
    opts, lines = begin("sequence_replay", __doc__, "rounds", 40, "rounds per run: a real step, a replay in "
                        "sequence, each call alone once per state", "## A step's calls replayed",
                        "{rounds} rounds per run (a real step, a replay of each phase, each call alone once per "
                        "state); training mode; medians over the rounds.")
    home = opts.workspace.resolve()
    log: list[str] = []
    for run, config, ts, trace in predicted_runs(home, log, FAMILIES):
        phases = measure_run(run["family"], config, int(run["batch_size"]), opts.rounds)
        lines += [f"### {run['workload']} b{run['batch_size']} (trace set {ts}, {run['platform']})", ""]
        for name, phase in phases.items():
            covers, unit, priced_per_call = PHASES[name]
            predicted = predicted_ops(trace, covers)
            priced = sum(us + t1 for _, us, t1 in predicted)
            lines += [f"**{name}**: {len(phase.calls)} {unit}. Predicted {priced / 1e3:.2f} ms (op prices "
                      f"{sum(us for _, us, _ in predicted) / 1e3:.2f} ms + T1).", ""]
            lines += state_lines(phase.real, phase.totals, phase.sequence, phase.medians, name)
            lines += op_lines(phase.calls, phase.sequence, phase.medians, predicted if priced_per_call else None,
                              opts.top)
            lines += gemm_lines(phase.calls, phase.sequence, phase.medians)
        print(f"sequence_replay: {run['workload']} done ({os.getloadavg()[0]:.2f} load)", file=sys.stderr)
    emit("\n".join(lines), opts.out)


if __name__ == "__main__":
    main()
