"""Per-op diagnosis of CPU predictions on this host: which ops the model prices away from their traced times.

For every single-rank CPU workload run of a workspace that has a model-mode prediction, the predicted iteration is
exported as a timeline (``pmdb predict --trace-set N --export-trace``: every op at its simulated time with its
predicted and traced µs) and summed per op name over one iteration: predicted against traced, the largest gaps first.
The iteration itself is split the same way: the unprofiled ground truth, the profiled (traced) iteration, the
prediction, and the op sums, so that what is left is the host's gaps between ops (T1). Run it on workspaces of each
host (`make demo`'s `pmdb-workspace`) to see which ops move between hosts, and by how much. Each run also lists its
profiled iterations against the unprofiled step. ``--profiler-tax`` adds the profiler's own cost per recorded op
event on this host, with and without the profiler as ``collect workload`` configures it
(:mod:`collectors.workloads.profiler_tax`: the wall tax, and what of it the IQR-kept overhead samples hold).
Diagnosis only: nothing here is fitted on, and no prediction rule is chosen by it. Each export stores one more
prediction in the workspace.

    .venv/bin/python benchmarks/host_op_diagnosis.py pmdb-workspace [--out FILE.md] [--top 12] [--profiler-tax]
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import Commands, host_line  # noqa: E402

COMMANDS = Commands("host_op_diagnosis")

RUNS = """
SELECT t.trace_set_id, w.name AS workload, w.batch_size, r.measured_us, r.platform,
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
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
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
    meta = trace.get("pmdb", {}) if isinstance(trace, dict) else {}
    return dict(sums), meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workspace", type=Path, help="a pmdb workspace with predicted single-rank CPU runs")
    parser.add_argument("--out", type=Path, help="write the tables to this Markdown file too")
    parser.add_argument("--top", type=int, default=12, help="ops per run, the largest gaps first (default 12)")
    parser.add_argument("--profiler-tax", action="store_true",
                        help="also measure the profiler's cost per recorded op event on this host (~20 s)")
    parser.add_argument("--blocks", type=int, default=41,
                        help="--profiler-tax: alternating blocks per case (default 41)")
    opts = parser.parse_args()
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
            iters = max(1, int(meta.get("iterations_predicted") or 1))
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
    if opts.profiler_tax:
        lines += tax_lines(opts.blocks)
    text = "\n".join(lines)
    print(text)
    if opts.out:
        opts.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
