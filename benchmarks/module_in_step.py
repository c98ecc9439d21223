"""A step's modules timed inside the real step and alone, round by round (µs).

Diagnosis for #36: the transformers' forward runs ~1.4x the warm sum of its calls (`sequence_replay.py`), and its
GEMMs ran ~2x their prices in the profiled step (`host_op_diagnosis.py`, GEMMs per phase). This asks which modules
lose that time without the profiler. Every leaf module of the model (one without children: `Linear`, `Conv1D`,
`LayerNorm`, `Dropout`, an activation, an embedding) is timed by a forward pre-hook and a forward hook:

* **in step**: inside a real training step (forward, loss, backward, optimizer step), one thread, pmdb's allocator
  settings (as `collect workload`);
* **warm**: right after the step, the same call on the same inputs (detached, grad kept on where it was), after two
  untimed calls of its own;
* **flushed**: then once more with the lines of its tensor arguments and of its module's parameters and buffers
  evicted from every cache level (:mod:`collectors.ops.cache_evict`, pmdb's cold state without its re-warm).

All three are timed between the same two hooks, so a call's hook cost falls on each alike. Each round runs one step
and every call alone, so the host's slow and fast phases (`host_two_speeds_*.md`) fall on all of them alike;
medians over the rounds. Each call is shown beside the kind of the leaf module that ran right before it in the
step: a GEMM right after scalar work (a dropout's random draws, a layer norm) takes up to 3x its back-to-back time
on the 48 MiB-L3 Intel host (`vector_idle_*.md`).

The hooks add Python between modules, and Python between vector work is what slows the next GEMM there, so the
in-step column is an upper side of the unhooked step's (read ratios between modules, not the step's total).
Diagnosis only: nothing is fitted on it and no prediction rule is chosen by it. Per single-rank transformer or DLRM
run of a workspace (its stored config) with a model-mode prediction.

    .venv/bin/python benchmarks/module_in_step.py pmdb-workspace [--rounds 30] [--top 12] [--out FILE.md (appended)]
"""
from __future__ import annotations

import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from host_op_diagnosis import trainer_of  # noqa: E402
from in_context_ops import begin, tensors_in, trainer_runs  # noqa: E402
from pmdb_commands import emit  # noqa: E402

FAMILIES = ("dlrm", "transformer")
STATES = ("in step", "warm", "flushed")
GEMM_MODULES = frozenset({"Linear", "Conv1D"})
WARM_UPS = 2


class Call:
    """One leaf-module call of the step, in order: its module, the kind that ran before it, and its times (µs).
    (A plain class: the benchmark is loaded by path, where a dataclass cannot find its module.)"""

    def __init__(self, name: str, module: Any, after: str) -> None:
        self.name, self.module, self.after = name, module, after
        self.times: dict[str, list[float]] = {state: [] for state in STATES}

    @property
    def kind(self) -> str:
        return type(self.module).__name__

    def median(self, state: str) -> float:
        return statistics.median(self.times[state]) if self.times[state] else float("nan")


def _detached(value: Any) -> Any:
    """A call's arguments for its calls alone: every tensor detached (grad kept on where it was)."""
    import torch
    from torch.utils._pytree import tree_map_only

    return tree_map_only(torch.Tensor, lambda t: t.detach().requires_grad_(t.requires_grad), value)


class ModuleClock:
    """Hooks on every leaf module of ``model``: :meth:`step` times the calls of one training step, :meth:`alone`
    each recorded call by itself, warm and flushed."""

    def __init__(self, model: Any) -> None:
        from collectors.ops import cache_evict

        self.evictor = cache_evict.load()
        self.calls: list[Call] = []
        self.state: str | None = None      # where the next timed call goes; None: not timed
        self._recorded: list[tuple[Any, tuple, dict]] = []
        self._started = 0
        self._index = 0
        self._handles = []
        for name, module in model.named_modules():
            if name and not list(module.children()):
                self._handles.append(module.register_forward_pre_hook(self._pre(name), with_kwargs=True))
                self._handles.append(module.register_forward_hook(self._post()))

    def _pre(self, name: str):
        def hook(module: Any, args: tuple, kwargs: dict) -> None:
            if self.state == "in step":
                k = len(self._recorded)
                if k == len(self.calls):
                    self.calls.append(Call(name, module, self.calls[-1].kind if self.calls else "-"))
                self._recorded.append((module, args, kwargs))   # detached after the step: no work added in it
                self._index = k
            self._started = time.perf_counter_ns()
        return hook

    def _post(self):
        def hook(module: Any, args: tuple, output: Any) -> None:
            elapsed = (time.perf_counter_ns() - self._started) / 1e3
            if self.state is not None and self._index < len(self.calls):
                self.calls[self._index].times[self.state].append(elapsed)
        return hook

    def step(self, trainer: Any, batch_id: int) -> None:
        """One real training step, its leaf-module calls timed and their inputs kept for :meth:`alone`."""
        self._recorded = []
        self.state = "in step"
        try:
            trainer.step(batch_id)
        finally:
            self.state = None
        if len(self._recorded) != len(self.calls):   # a step that called other modules than the first: not comparable
            raise RuntimeError(f"the step called {len(self._recorded)} leaf modules, the first one {len(self.calls)}")

    def alone(self) -> None:
        """Each call recorded by the last :meth:`step` by itself: warm, then flushed (this step's inputs)."""
        from collectors.ops import cache_evict

        for k, (module, args, kwargs) in enumerate(self._recorded):
            args, kwargs = _detached(args), _detached(kwargs)
            self._index = k
            for _ in range(WARM_UPS):
                module(*args, **kwargs)
            self.state = "warm"
            module(*args, **kwargs)
            if self.evictor is not None:
                owned = list(module.parameters(recurse=False)) + list(module.buffers(recurse=False))
                self.evictor.evict(cache_evict.storage_ranges(tensors_in(args, kwargs) + owned))
                self.state = "flushed"
                module(*args, **kwargs)
            self.state = None
        self._recorded = []

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def measure(trainer: Any, ids: list[int], rounds: int) -> list[Call]:
    """``rounds`` rounds of a real step then every call alone; the calls with their times."""
    trainer.model.train(True)
    clock = ModuleClock(trainer.model)
    try:
        for k in range(rounds):
            clock.step(trainer, ids[k % len(ids)])
            clock.alone()
    finally:
        clock.close()
    return clock.calls


def _is_gemm(kind: str) -> bool:
    return kind in GEMM_MODULES


def total_lines(calls: list[Call]) -> list[str]:
    """Sums of the per-call medians per state, for the GEMM modules and the others."""
    lines = ["| modules | calls | in step µs | warm µs | flushed µs | in step / warm | in step / flushed |",
             "|---|---|---|---|---|---|---|"]
    for label, chosen in (("GEMMs (Linear, Conv1D)", [c for c in calls if _is_gemm(c.kind)]),
                          ("the others", [c for c in calls if not _is_gemm(c.kind)]), ("all", calls)):
        sums = {state: sum(c.median(state) for c in chosen) for state in STATES}
        lines.append(f"| {label} | {len(chosen)} | {sums['in step']:.0f} | {sums['warm']:.0f} | "
                     f"{sums['flushed']:.0f} | {_ratio(sums['in step'], sums['warm'])} | "
                     f"{_ratio(sums['in step'], sums['flushed'])} |")
    return lines + [""]


def after_lines(calls: list[Call]) -> list[str]:
    """The GEMM calls grouped by the kind of leaf module that ran right before them in the step."""
    groups: dict[str, list[Call]] = defaultdict(list)
    for call in calls:
        if _is_gemm(call.kind):
            groups[call.after].append(call)
    if not groups:
        return []
    lines = ["| GEMMs right after | calls | in step µs | warm µs | in step / warm |", "|---|---|---|---|---|"]
    for after, chosen in sorted(groups.items(), key=lambda kv: -sum(c.median("in step") for c in kv[1])):
        step, warm = sum(c.median("in step") for c in chosen), sum(c.median("warm") for c in chosen)
        lines.append(f"| {after} | {len(chosen)} | {step:.0f} | {warm:.0f} | {_ratio(step, warm)} |")
    return lines + [""]


def call_lines(calls: list[Call], top: int) -> list[str]:
    """The ``top`` calls that lose the most in the step against their warm time, in step order."""
    ranked = sorted(range(len(calls)), key=lambda k: -(calls[k].median("in step") - calls[k].median("warm")))[:top]
    lines = ["| # | module | kind | after | in step µs | warm µs | flushed µs | in step / warm |",
             "|---|---|---|---|---|---|---|---|"]
    for k in sorted(ranked):
        c = calls[k]
        lines.append(f"| {k} | {_tail(c.name, 36)} | {c.kind} | {c.after} | {c.median('in step'):.0f} | "
                     f"{c.median('warm'):.0f} | {c.median('flushed'):.0f} | "
                     f"{_ratio(c.median('in step'), c.median('warm'))} |")
    return lines + [""]


def _ratio(a: float, b: float) -> str:
    return f"x{a / b:.2f}" if b > 0 else "-"


def _tail(name: str, width: int) -> str:
    return name if len(name) <= width else "…" + name[-(width - 1):]


def main() -> None:
    opts, lines = begin("module_in_step", __doc__, "rounds", 30, "rounds per run: a real step, then every leaf "
                        "module call alone, warm and flushed", "## A step's modules inside it and alone",
                        "{rounds} rounds per run (a real training step, then each leaf-module call alone: warm, "
                        "flushed); medians over the rounds.")
    home = opts.workspace.resolve()
    log: list[str] = []
    for run, config, ts in trainer_runs(home, log, FAMILIES):
        trainer, ids = trainer_of(run["family"], config, int(run["batch_size"]), opts.rounds)
        calls = measure(trainer, ids, opts.rounds)
        lines += [f"### {run['workload']} b{run['batch_size']} (trace set {ts}, {run['platform']})", "",
                  f"{len(calls)} leaf-module calls per step.", ""]
        lines += total_lines(calls) + after_lines(calls) + call_lines(calls, opts.top)
        print(f"module_in_step: {run['workload']} done ({os.getloadavg()[0]:.2f} load)", file=sys.stderr)
    emit("\n".join(lines), opts.out)


if __name__ == "__main__":
    main()
