"""The forward's ops timed inside the training step, unprofiled, against the prices the prediction gave them (µs).

`host_op_diagnosis.py` compares predicted op times with the profiled trace's, which carry the profiler's own cost,
and its ``--phases`` times whole phases. This times every top-level torch function of the forward (and loss) one by
one inside real training steps, without a profiler: a :class:`torch.overrides.TorchFunctionMode` reads the clock
around each outermost call (~0.1 µs; nested calls are not timed apart). Steps alternate between training mode and
eval mode (dropout off, autograd on in both), so the host's slow and fast phases fall on both alike. Reported per
single-rank transformer run of a workspace with a model-mode prediction:

* per op name: the predicted price per forward (the exported timeline's top-level ops), the sum of the per-call
  medians in training mode and in eval mode;
* the host's pace: the wake probe's linear (:mod:`collectors.wake_probe`) timed back to back between steps, against
  the median its op sweeps recorded when the prices were taken (above 1: the host is slower now than then);
* the GEMMs (linear, addmm, matmul, bmm, einsum) call by call in program order, with the predicted work since the
  previous GEMM ended: what a GEMM loses after a stretch without one (the host's vector wake-up,
  `vector_idle_*.md`) shows as training mode over eval mode where a dropout's random draws precede it.

Diagnosis only: nothing is fitted on it and no prediction rule is chosen by it. One thread, pmdb's allocator
settings (as `collect workload`). Each export stores one more prediction in the workspace.

    .venv/bin/python benchmarks/in_context_ops.py pmdb-workspace [--steps 200] [--out FILE.md (appended to)]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from host_op_diagnosis import GEMMS, runs, timeline, timeline_events, trainer_of  # noqa: E402
from pmdb_commands import emit, host_line  # noqa: E402

PACE_EVERY = 20   # steps between two pace probes
ALIASES = {"getitem": "index"}   # a torch function's name -> the aten name its trace op carries, where they differ


def short(name: str) -> str:
    """'aten::linear' -> 'linear', '__add__' -> 'add', 'add_' stays."""
    name = name.split("::")[-1]
    name = name[2:-2] if name.startswith("__") and name.endswith("__") else name
    return ALIASES.get(name, name)


def predicted_ops(trace: dict, phases: tuple[str, ...] = ("fw", "loss")) -> list[tuple[str, float, float]]:
    """(short op name, predicted µs, T1 µs before it) of the top-level ops of ``phases`` (default the forward and
    the loss) of one predicted iteration, in order."""
    events, _, iters = timeline_events(trace)
    ops = [(short(str(a["op"])), float(a["predicted_us"]), float(a.get("t1_us") or 0.0))
           for e in events if e.get("ph") == "X" and (a := e.get("args") or {}).get("phase") in phases
           and "predicted_us" in a and "op" in a]
    return ops[:len(ops) // iters] if iters > 1 else ops


def name_of(func: Any) -> str:
    """A torch function's name as Python knows it ('linear', '__add__', '__get__')."""
    return getattr(func, "__name__", str(func))


def tensors_in(*values: Any) -> list[Any]:
    """The tensors in ``values`` (nested tuples, lists and dicts walked; nothing reached through a tensor: not its
    autograd graph, whose saved tensors the op does not read)."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [leaf for leaf in tree_leaves(values) if isinstance(leaf, torch.Tensor)]


def outermost_mode(record: Callable[[Any, tuple, dict, float], None]) -> Any:
    """A :class:`torch.overrides.TorchFunctionMode` that runs every torch call and hands each outermost one to
    ``record(func, args, kwargs, µs)`` once it returned (calls made inside it run unrecorded)."""
    from torch.overrides import TorchFunctionMode

    class Outermost(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.depth = 0

        def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            if self.depth:
                return func(*args, **kwargs)
            self.depth += 1
            begun = time.perf_counter_ns()
            try:
                return func(*args, **kwargs)
            finally:
                record(func, args, kwargs, (time.perf_counter_ns() - begun) / 1e3)
                self.depth -= 1

    return Outermost()


def measured_forward(config: dict, batch_size: int, steps: int) -> tuple[dict[bool, list[list[tuple[str, float]]]],
                                                                          dict[bool, list[float]], list[float]]:
    """Per mode (True: training), the forward's outermost torch calls of every step as (short name, µs), the
    forward's own times (µs), and the wake probe's back-to-back time every PACE_EVERY steps (µs); ``steps`` steps,
    the modes alternating."""
    from collectors.wake_probe import read_wake

    import torch

    trainer, ids = trainer_of("transformer", config, batch_size, steps)
    calls: dict[bool, list[list[tuple[str, float]]]] = {True: [], False: []}
    forward: dict[bool, list[float]] = {True: [], False: []}
    pace: list[float] = []
    for k in range(steps):
        if k % PACE_EVERY == 0:
            pace.append(read_wake(rounds=3)["back_to_back_us"])
        training = k % 2 == 0
        trainer.model.train(training)
        batch = trainer.batches[ids[k % len(ids)]]
        trainer.optimizer.zero_grad()
        timed: list[tuple[str, float]] = []
        clock = outermost_mode(lambda func, args, kwargs, us: timed.append((short(name_of(func)), us)))
        begun = time.perf_counter_ns()
        with clock:
            loss = trainer.model(**batch).loss
        forward[training].append((time.perf_counter_ns() - begun) / 1e3)
        loss.backward()
        trainer.optimizer.step()
        calls[training].append(timed)
    trainer.model.train(True)
    return calls, forward, pace


def sweep_pace(home: Path, platform: str) -> list[float]:
    """The wake probe's back-to-back times (µs) the platform's op sweeps recorded."""
    from pmdb.config import Workspace
    from pmdb.store import Store
    from simulator.memory_phase import sweep_summaries
    from simulator.wake_loss import read_probes

    with Store.open(Workspace(home), read_only=True) as store:
        return [p["back_to_back_us"] for summary in sweep_summaries(store, platform) for p in read_probes(summary)]


def pace_line(now: list[float], then: list[float]) -> str:
    if not now or not then:
        return "Host pace: no wake probes to compare."
    a, b = statistics.median(now), statistics.median(then)
    return (f"Host pace: the probe's linear took {a:.0f} µs back to back between these steps (median of {len(now)}; "
            f"{min(now):.0f}-{max(now):.0f}) against {b:.0f} µs in the op sweeps ({len(then)} probes; "
            f"{min(then):.0f}-{max(then):.0f}): x{a / b:.2f}.")


def per_call_medians(steps: list[list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """The median of each call position over steps whose call sequence is the most common one."""
    shapes = defaultdict(list)
    for step in steps:
        shapes[tuple(n for n, _ in step)].append(step)
    names, kept = max(shapes.items(), key=lambda kv: len(kv[1]))
    return [(name, statistics.median(step[i][1] for step in kept)) for i, name in enumerate(names)]


def op_lines(predicted: list[tuple[str, float, float]], train: list[tuple[str, float]],
             evaluated: list[tuple[str, float]], top: int) -> list[str]:
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for name, us, _ in predicted:
        sums[name][0] += us
        sums[name][3] += 1
    for name, us in train:
        sums[name][1] += us
    for name, us in evaluated:
        sums[name][2] += us
    lines = ["| op | calls (predicted) | predicted µs | in step, training µs | in step, eval µs | training / "
             "predicted | eval / predicted |", "|---|---|---|---|---|---|---|"]
    ranked = sorted(sums.items(), key=lambda kv: -abs(kv[1][1] - kv[1][0]))[:top]
    for name, (p, t, e, n) in ranked:
        ratio = (lambda x: f"x{x / p:.2f}" if p > 0 and x > 0 else "-")
        lines.append(f"| {name} | {n} | {p:.0f} | {t:.0f} | {e:.0f} | {ratio(t)} | {ratio(e)} |")
    return lines + [""]


def gemm_lines(predicted: list[tuple[str, float, float]], train: list[tuple[str, float]],
               evaluated: list[tuple[str, float]]) -> list[str]:
    """The GEMMs call by call, with the predicted work since the previous GEMM (T1 gaps included)."""
    rows, since, before = [], 0.0, []
    for name, us, t1 in predicted:
        since += t1
        if name in GEMMS:
            rows.append((name, us, since, before))
            since, before = 0.0, []
        else:
            since += us
            before.append(name)
    got_t = [us for name, us in train if name in GEMMS]
    got_e = [us for name, us in evaluated if name in GEMMS]
    if not (len(rows) == len(got_t) == len(got_e)):
        return [f"(GEMMs not matched call by call: {len(rows)} predicted, {len(got_t)} / {len(got_e)} timed)", ""]
    lines = ["| # | GEMM | predicted µs | training µs | eval µs | training - eval µs | predicted µs since the "
             "previous GEMM | ops between |", "|---|---|---|---|---|---|---|---|"]
    for k, ((name, us, since, between), t, e) in enumerate(zip(rows, got_t, got_e)):
        shown = ", ".join(n for n in between if n not in ("view", "transpose", "reshape", "expand", "permute"))
        lines.append(f"| {k} | {name} | {us:.0f} | {t:.0f} | {e:.0f} | {t - e:+.0f} | {since:.0f} | "
                     f"{shown[:60] or '-'} |")
    return lines + [""]


def trainer_runs(home: Path, log: list[str], families: tuple[str, ...] = ("transformer",)) -> Iterator[
        tuple[dict, dict, int]]:
    """(run row, its stored config, its trace set) of each single-rank CPU run of ``families`` in a workspace with a
    model-mode prediction, whose trainer can be rebuilt (not the shape-only captures of the GPU what-if)."""
    for run in runs(home, log):
        if run["family"] not in families or not run["predicted_us"]:
            continue
        config = json.loads(run["config"])
        if run["family"] != "transformer" or "arch" in config:
            yield run, config, int(run["trace_set_id"])


def predicted_runs(home: Path, log: list[str], families: tuple[str, ...] = ("transformer",)) -> Iterator[
        tuple[dict, dict, int, dict]]:
    """:func:`trainer_runs` with each run's exported predicted timeline (read it with :func:`predicted_ops`)."""
    with tempfile.TemporaryDirectory() as tmp:
        for run, config, ts in trainer_runs(home, log, families):
            yield run, config, ts, timeline(home, ts, Path(tmp) / f"ts{ts}.json", log)


def begin(program: str, doc: str, count: str, default: int, count_help: str, title: str,
          what: str) -> tuple[argparse.Namespace, list[str]]:
    """Parse the arguments both step diagnoses take (the workspace, ``--<count>`` of at least 2, ``--top`` op
    names, ``--out`` Markdown file; exit 2 with one line where a count is out of range or the workspace is missing),
    set the process up to time as `collect workload` does (one thread, pmdb's allocator settings): the options, and
    the report's title and host lines (``what``: a format string of the options)."""
    import torch

    from collectors.workloads.allocator import apply_in_process

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("workspace", type=Path, help="a pmdb workspace with predicted single-rank CPU runs")
    parser.add_argument(f"--{count}", type=int, default=default, help=f"{count_help} (default {default})")
    parser.add_argument("--top", type=int, default=12, help="op names per run, the largest first (default 12)")
    parser.add_argument("--out", type=Path, help="append the tables to this Markdown file too")
    opts = parser.parse_args()
    if getattr(opts, count) < 2 or opts.top < 1:
        print(f"{program}: --{count} must be at least 2 and --top at least 1", file=sys.stderr)
        sys.exit(2)
    from pmdb.config import Workspace

    if not Workspace(opts.workspace.resolve()).db_path.is_file():
        print(f"{program}: no pmdb workspace at {opts.workspace} (run `make demo`, or point at a pmdb-workspace)",
              file=sys.stderr)
        sys.exit(2)
    apply_in_process()
    torch.set_num_threads(1)
    return opts, [f"{title} — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
                  f"Host: {host_line()}; load average {os.getloadavg()[0]:.2f} at start; workspace "
                  f"`{opts.workspace}`; {what.format(**vars(opts))}", ""]


def main() -> None:
    opts, lines = begin("in_context_ops", __doc__, "steps", 200, "training steps per run, the modes alternating",
                        "# The forward's ops inside the step, unprofiled",
                        "{steps} steps per run, training and eval mode alternating; medians per call.")
    home = opts.workspace.resolve()
    log: list[str] = []
    for run, config, ts, trace in predicted_runs(home, log):
        predicted = predicted_ops(trace)
        calls, forward, pace = measured_forward(config, int(run["batch_size"]), opts.steps)
        train, evaluated = per_call_medians(calls[True]), per_call_medians(calls[False])
        priced = sum(us + t1 for _, us, t1 in predicted)
        lines += [f"## {run['workload']} b{run['batch_size']} (trace set {ts}, {run['platform']})", "",
                  f"Forward + loss: predicted {priced / 1e3:.2f} ms (op prices "
                  f"{sum(us for _, us, _ in predicted) / 1e3:.2f} + T1); in the step, unprofiled, training "
                  f"mode {statistics.median(forward[True]) / 1e3:.2f} ms, eval mode "
                  f"{statistics.median(forward[False]) / 1e3:.2f} ms (medians; the timed calls sum to "
                  f"{sum(us for _, us in train) / 1e3:.2f} / {sum(us for _, us in evaluated) / 1e3:.2f} ms).", "",
                  pace_line(pace, sweep_pace(home, run["platform"])), ""]
        lines += op_lines(predicted, train, evaluated, opts.top)
        lines += gemm_lines(predicted, train, evaluated)
    emit("\n".join(lines), opts.out)


if __name__ == "__main__":
    main()
