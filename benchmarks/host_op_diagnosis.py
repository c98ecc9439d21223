"""Per-op diagnosis of CPU predictions on this host: which ops the model prices away from their traced times.

For every single-rank CPU workload run of a workspace that has a model-mode prediction, the predicted iteration is
exported as a timeline (``pmdb predict --trace-set N --export-trace``: every op at its simulated time with its
predicted and traced µs) and summed per op name over one iteration: predicted against traced, the largest gaps first.
Its GEMMs are summed per phase too, apart for those right after another GEMM and those after other work, since a
forward GEMM after elementwise work runs slower than its microbenchmark (``benchmarks/vector_idle.py``).
The iteration itself is split the same way: the unprofiled ground truth, the profiled (traced) iteration, the
prediction, and the op sums, so that what is left is the host's gaps between ops (T1). Run it on workspaces of each
host (`make demo`'s `pmdb-workspace`) to see which ops move between hosts, and by how much. Each run also lists its
profiled iterations against the unprofiled step. ``--profiler-tax`` adds the profiler's own cost per recorded op
event on this host, with and without the profiler as ``collect workload`` configures it
(:mod:`collectors.workloads.profiler_tax`: the wall tax, and what of it the IQR-kept overhead samples hold).
``--phases STEPS`` rebuilds each run's trainer from its stored config and times STEPS unprofiled steps phase by
phase (zero_grad, forward with the loss, backward, optimizer step; one thread, pmdb's allocator settings), against
the predicted iteration's op prices and T1 gaps per phase: where the traced op times carry the profiler's cost, this
says which phase the prices miss.
Diagnosis only: nothing here is fitted on, and no prediction rule is chosen by it. Each export stores one more
prediction in the workspace.

    .venv/bin/python benchmarks/host_op_diagnosis.py pmdb-workspace [--out FILE.md] [--top 12] [--profiler-tax]
        [--phases 300]
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import Commands, host_line  # noqa: E402

COMMANDS = Commands("host_op_diagnosis")

RUNS = """
SELECT t.trace_set_id, w.name AS workload, w.family, CAST(w.config AS VARCHAR) AS config, w.batch_size,
       r.measured_us, r.platform,
       (SELECT max(p.predicted_us) FROM predictions p WHERE p.trace_set_id = t.trace_set_id
          AND p.mode = 'model') AS predicted_us
FROM trace_sets t JOIN workloads w USING (workload_id) JOIN workload_runs r ON r.workload_id = w.workload_id
JOIN platforms pl ON pl.name = r.platform
WHERE w.world_size = 1 AND pl.device_kind = 'cpu' AND r.measured_us IS NOT NULL
QUALIFY row_number() OVER (PARTITION BY t.trace_set_id ORDER BY r.run_id DESC) = 1
ORDER BY w.family, w.name
"""


ITERATIONS = """
SELECT t.trace_set_id, i.iteration, i.dur_us FROM trace_iterations i JOIN traces t USING (trace_id)
WHERE t.kind = 'kineto' AND t.rank = 0 ORDER BY t.trace_set_id, i.iteration
"""


def runs(home: Path, log: list[str]) -> list[dict]:
    return COMMANDS.sql(home, RUNS, log)


def profiled_iterations(home: Path, log: list[str]) -> dict[int, list[float]]:
    """{trace set: its rank-0 Kineto trace's iteration times (µs), in order}."""
    out: dict[int, list[float]] = defaultdict(list)
    for row in COMMANDS.sql(home, ITERATIONS, log):
        out[int(row["trace_set_id"])].append(float(row["dur_us"]))
    return dict(out)


def iterations_line(profiled: list[float], truth_us: float) -> str:
    """The profiled iterations (ms) and each as a multiple of the unprofiled step."""
    if not profiled or not truth_us:
        return "no profiled iterations stored."
    times = " / ".join(f"{t / 1e3:.2f}" for t in profiled)
    ratios = " / ".join(f"{t / truth_us:.2f}" for t in profiled)
    return f"profiled iterations {times} ms (x {ratios} of the unprofiled step)."


def tax_lines(blocks: int) -> list[str]:
    """The profiler-tax calibration on this host as a Markdown section."""
    from collectors.workloads.profiler_tax import measure

    load = os.getloadavg()[0]
    cases = measure(blocks)
    lines = [f"## The profiler's own cost per recorded op event (this host, load {load:.2f} -> "
             f"{os.getloadavg()[0]:.2f})", "",
             f"Alternating blocks without and with the profiler as `collect workload` configures it (CPU, "
             f"record_shapes), {blocks} each, 1 thread; medians. Wall tax: what profiling adds to a step, per event "
             f"(quartiles over block pairs); kept: what of it the IQR-kept T1-T5 samples hold.", "",
             "| case | events / call | unprofiled µs | profiled µs | wall tax µs / event (q25-q75) | "
             "kept tax µs / event |", "|---|---|---|---|---|---|"]
    for c in cases:
        kept = "-" if c.kept_tax_us is None else f"{c.kept_tax_us:+.2f}"
        lines.append(f"| {c.name} | {c.events_per_call:.0f} | {c.unprofiled_us:.2f} | {c.profiled_us:.2f} | "
                     f"{c.tax_us:.2f} ({c.tax_q25_us:.2f}-{c.tax_q75_us:.2f}) | {kept} |")
    return lines + [""]


def timeline(home: Path, trace_set: int, path: Path, log: list[str]) -> dict:
    COMMANDS.run(home, "predict", "--trace-set", str(trace_set), "--export-trace", str(path), log=log)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def per_op(trace: dict) -> tuple[dict[str, list[float]], dict]:
    """{op name: [predicted µs, traced µs, count]} over the predicted host ops of one iteration, and the metadata."""
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    events, meta, _ = timeline_events(trace)
    for event in events:
        args = event.get("args") or {}
        if event.get("ph") != "X" or "predicted_us" not in args or "op" not in args or "traced_us" not in args:
            continue
        if event.get("cat") not in ("cpu_op", "host_op", None) and not str(event.get("cat", "")).endswith("op"):
            continue
        row = sums[args["op"]]
        row[0] += float(args["predicted_us"])
        row[1] += float(args["traced_us"])
        row[2] += 1
    return dict(sums), meta


PHASE_ROWS = (("zero_grad", "zero_grad"), ("forward + loss", "fw"), ("backward", "bw"),
              ("optimizer step", "optimizer"))


def timeline_events(trace: Any) -> tuple[list[dict], dict, int]:
    """An exported timeline's events, its ``pmdb`` metadata and how many iterations it predicted (at least 1):
    per-iteration sums divide by the last."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    meta = trace.get("pmdb", {}) if isinstance(trace, dict) else {}
    return events, meta, max(1, int(meta.get("iterations_predicted") or 1))


def predicted_phases(trace: dict) -> dict[str, tuple[float, float]]:
    """Per phase (fw, loss, bw, optimizer) of an exported timeline: (its top-level op prices, the T1 gaps before
    them), µs per iteration. Loss ops count with the forward, as a forward timed up to ``loss`` holds them."""
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    events, _, iters = timeline_events(trace)
    for event in events:
        args = event.get("args") or {}
        phase = args.get("phase")
        if event.get("ph") != "X" or phase is None or "predicted_us" not in args:
            continue
        row = out["fw" if phase == "loss" else phase]
        row[0] += float(args["predicted_us"]) / iters
        row[1] += float(args.get("t1_us") or 0.0) / iters
    return {phase: (ops, t1) for phase, (ops, t1) in out.items()}


GEMMS = ("linear", "addmm", "matmul", "bmm", "einsum", "mm", "baddbmm")   # forward GEMM calls, by short name
GEMM_BACKWARD = ("AddmmBackward", "MmBackward", "BmmBackward", "BaddbmmBackward", "LinearBackward")
AFTER_OTHER_WORK_US = 200.0   # a GEMM "after other work": at least this much predicted non-GEMM time since the last


def is_gemm(op: str) -> bool:
    """Whether a top-level op of a timeline runs dense multiply-adds: a forward GEMM call or its backward node."""
    return (op.startswith("aten::") and op.split("::")[-1] in GEMMS) or any(name in op for name in GEMM_BACKWARD)


def gemm_phase_sums(trace: dict) -> dict[tuple[str, str], list[float]]:
    """{(phase, 'right after a GEMM' or 'after other work'): [predicted µs, traced µs, calls]} of the top-level
    GEMM ops of an exported timeline, per iteration. A GEMM is "after other work" when the predicted prices and
    gaps of the non-GEMM ops since the previous GEMM reach :data:`AFTER_OTHER_WORK_US` (the first GEMM of each
    phase counts what ran since the last one of the phase before). Predicted and traced come from the same
    profiled iterations, so the host's phase falls on both phases alike."""
    events, _, iters = timeline_events(trace)
    ops = sorted((e for e in events if e.get("ph") == "X" and (e.get("args") or {}).get("phase")
                  and "predicted_us" in e["args"] and "traced_us" in e["args"] and "op" in e["args"]),
                 key=lambda e: float(e.get("ts") or 0.0))
    out: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    since = 0.0
    for event in ops:
        args = event["args"]
        phase = "fw" if args["phase"] == "loss" else args["phase"]
        if not is_gemm(str(args["op"])):
            since += float(args["predicted_us"]) + float(args.get("t1_us") or 0.0)
            continue
        row = out[(phase, "after other work" if since >= AFTER_OTHER_WORK_US else "right after a GEMM")]
        row[0] += float(args["predicted_us"]) / iters
        row[1] += float(args["traced_us"]) / iters
        row[2] += 1.0 / iters
        since = 0.0
    return dict(out)


def gemm_lines(sums: dict[tuple[str, str], list[float]]) -> list[str]:
    """The table of :func:`gemm_phase_sums`: traced over predicted per phase and kind of GEMM."""
    if not sums:
        return []
    lines = [f"GEMMs per phase (top-level calls; \"after other work\": >= {AFTER_OTHER_WORK_US:.0f} µs of predicted "
             f"non-GEMM work since the previous GEMM), traced against predicted in the same profiled iterations "
             f"(traced times carry the profiler's own cost per recorded event, see --profiler-tax):", "",
             "| phase | GEMMs | calls | predicted µs | traced µs | traced / predicted |", "|---|---|---|---|---|---|"]
    for (phase, kind), (predicted, traced, calls) in sorted(sums.items()):
        ratio = f"x{traced / predicted:.2f}" if predicted > 0 else "-"
        lines.append(f"| {phase} | {kind} | {calls:g} | {predicted:.0f} | {traced:.0f} | {ratio} |")
    return lines + [""]


def trainer_of(family: str, config: dict, batch_size: int, steps: int):
    """The single-rank trainer of a stored workload (its stored config), on the CPU, seed 0, warmed up on its first
    min(steps, 20) batches (the optimizer's state exists, the allocator's heap has grown); and those batch ids."""
    import torch

    from collectors.workloads.trainers import make_trainer, stored_config

    trainer = make_trainer(family, stored_config(family, config, batch_size), torch.device("cpu"))
    ids = list(range(min(steps, 20)))
    trainer.prepare(ids)
    for k in ids:
        trainer.step(k)
    return trainer, ids


def phase_marks(trainer, family: str, batch) -> list[int]:
    """One unprofiled training step of ``trainer`` on ``batch``, its phases marked (perf_counter_ns): before
    zero_grad, after it, after the forward with the loss, after the backward, after the optimizer step."""
    import time

    marks = [time.perf_counter_ns()]
    trainer.optimizer.zero_grad()
    marks.append(time.perf_counter_ns())
    loss = trainer.loss(trainer.model(batch.dense, batch.indices, batch.offsets), batch.labels) \
        if family == "dlrm" else trainer.model(**batch).loss
    marks.append(time.perf_counter_ns())
    loss.backward()
    marks.append(time.perf_counter_ns())
    trainer.optimizer.step()
    marks.append(time.perf_counter_ns())
    return marks


def measured_phases(family: str, config: dict, batch_size: int, steps: int) -> dict[str, tuple[float, float]]:
    """Per phase (zero_grad, fw, bw, optimizer) of ``steps`` unprofiled training steps of the workload, each phase
    timed apart: (median, 10th percentile) µs. One thread, pmdb's allocator settings (as `collect workload`)."""
    import statistics

    import numpy as np

    trainer, ids = trainer_of(family, config, batch_size, steps)
    times: dict[str, list[float]] = defaultdict(list)
    for k in range(steps):
        marks = phase_marks(trainer, family, trainer.batches[ids[k % len(ids)]])
        for (_, phase), begun, ended in zip(PHASE_ROWS, marks, marks[1:]):
            times[phase].append((ended - begun) / 1e3)
    return {phase: (statistics.median(v), float(np.percentile(v, 10))) for phase, v in times.items()}


def phase_lines(measured: dict[str, tuple[float, float]], predicted: dict[str, tuple[float, float]],
                steps: int) -> list[str]:
    """The per-phase table of one run: measured unprofiled median (p10) against the predicted op prices + T1."""
    lines = [f"Per phase, unprofiled ({steps} steps, each phase timed apart) against the predicted iteration:", "",
             "| phase | measured median (p10) ms | predicted op prices + T1 ms | predicted / measured median |",
             "|---|---|---|---|"]
    for label, phase in PHASE_ROWS:
        median, p10 = measured.get(phase, (float("nan"), float("nan")))
        ops, t1 = predicted.get(phase, (0.0, 0.0))
        if phase in predicted and median > 0:
            priced, ratio = f"{ops / 1e3:.2f} + {t1 / 1e3:.2f}", f"x{(ops + t1) / median:.2f}"
        else:
            priced, ratio = "not priced (no op)", "-"
        lines.append(f"| {label} | {median / 1e3:.2f} ({p10 / 1e3:.2f}) | {priced} | {ratio} |")
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workspace", type=Path, help="a pmdb workspace with predicted single-rank CPU runs")
    parser.add_argument("--out", type=Path, help="write the tables to this Markdown file too")
    parser.add_argument("--top", type=int, default=12, help="ops per run, the largest gaps first (default 12)")
    parser.add_argument("--profiler-tax", action="store_true",
                        help="also measure the profiler's cost per recorded op event on this host (~20 s)")
    parser.add_argument("--blocks", type=int, default=41,
                        help="--profiler-tax: alternating blocks per case (default 41)")
    parser.add_argument("--phases", type=int, default=0, metavar="STEPS",
                        help="also time STEPS unprofiled steps of each run phase by phase, one thread, and put "
                             "them against the predicted phases (default 0: not done)")
    opts = parser.parse_args()
    if opts.phases < 0 or opts.top < 1:
        print("host_op_diagnosis: --phases must be 0 or more and --top at least 1", file=sys.stderr)
        sys.exit(2)
    if opts.phases:
        import torch

        from collectors.workloads.allocator import apply_in_process

        apply_in_process()
        torch.set_num_threads(1)
    home = opts.workspace.resolve()
    lines = [f"# Per-op diagnosis of CPU predictions — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; load average {os.getloadavg()[0]:.2f} at start; workspace `{opts.workspace}`.", ""]
    log: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        iterations = profiled_iterations(home, log)
        for run in runs(home, log):
            ts = int(run["trace_set_id"])
            trace = timeline(home, ts, Path(tmp) / f"ts{ts}.json", log)
            ops, meta = per_op(trace)
            iters = timeline_events(trace)[2]
            pred_ops = sum(v[0] for v in ops.values()) / iters
            traced_ops = sum(v[1] for v in ops.values()) / iters
            predicted = float(meta.get("isolated_us") or run["predicted_us"] or 0.0)
            lines += [f"## {run['workload']} b{run['batch_size']} (trace set {ts}, {run['platform']})", "",
                      f"truth (unprofiled) {run['measured_us'] / 1e3:.2f} ms; predicted iteration "
                      f"{predicted / 1e3:.2f} ms ({100 * (predicted / run['measured_us'] - 1):+.1f}%); host ops "
                      f"predicted {pred_ops / 1e3:.2f} ms against {traced_ops / 1e3:.2f} ms traced; the rest "
                      f"(gaps between ops, T1) {(predicted - pred_ops) / 1e3:.2f} ms predicted; "
                      f"{iterations_line(iterations.get(ts, []), run['measured_us'])}", "",
                      "| op | calls | predicted µs | traced µs | gap µs | gap % |", "|---|---|---|---|---|---|"]
            ranked = sorted(ops.items(), key=lambda kv: -abs(kv[1][0] - kv[1][1]))[:opts.top]
            for name, (p, t, n) in ranked:
                p, t = p / iters, t / iters
                lines.append(f"| {name} | {n / iters:g} | {p:.0f} | {t:.0f} | {p - t:+.0f} | "
                             f"{100 * (p / t - 1) if t else float('nan'):+.1f}% |")
            lines.append("")
            lines += gemm_lines(gemm_phase_sums(trace))
            if opts.phases and run["family"] in ("dlrm", "transformer"):
                measured = measured_phases(run["family"], json.loads(run["config"]), int(run["batch_size"]),
                                           opts.phases)
                lines += phase_lines(measured, predicted_phases(trace), opts.phases)
    if opts.profiler_tax:
        lines += tax_lines(opts.blocks)
    text = "\n".join(lines)
    print(text)
    if opts.out:
        opts.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
