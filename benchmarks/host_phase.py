"""How this host's pace moves over minutes: the main job's step against microbenchmarks of its own ops and the read
rate of buffers around the last-level cache.

Diagnosis for the main job on either host (issue #36): nothing here is fitted on, and no prediction rule is chosen by
it. One process, one thread, in windows of a few seconds until ``--minutes`` have passed. Each window measures, one
after the other:

* ``step``: the median of ``--steps`` training steps (µs) of one of the quickstart's single-rank runs (``--workload``:
  ``bert``, ``gpt2`` or ``xlnet`` with the quickstart's shape, 2 layers, hidden 64, 4 heads, batch 8, sequence 64, AdamW;
  or ``dlrm``, the ``dlrm_mixed`` preset at world size 1), with pmdb's allocator settings;
* ``addmm``, ``dropout``, ``layer_norm``: medians of ``--reps`` back-to-back calls (µs) of three op shapes of the
  transformer step (512x64 -> 256, and 8x64x64 in training mode): operands that stay in L2, as the sweep's warm
  state has them;
* ``read16``, ``read64``: the time (µs) of a sum over a 16 MiB and a 64 MiB buffer read just before (the median of
  ``--reads``): working sets around what a step touches and what the last-level cache holds for one process.

Then, per series, the spread over windows (max / min, and the slowest quarter's median over the fastest quarter's) and
its rank correlation with ``step`` (Spearman). A series that moves with the step measures the cause of the step's
drift; one that does not move while the step does cannot have priced it.

    .venv/bin/python benchmarks/host_phase.py [--minutes 15] [--workload bert] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import host_line  # noqa: E402
from collectors.workloads.allocator import apply_in_process  # noqa: E402

WORKLOADS = ("bert", "gpt2", "xlnet", "dlrm")
SERIES = ("step", "addmm", "dropout", "layer_norm", "read16", "read64")


def build_step(workload: str, steps: int) -> Callable[[], list[float]]:
    """A function timing ``steps`` training steps of the workload (µs each), its inputs prepared once."""
    from collectors.workloads.trainers import make_trainer

    if workload == "dlrm":
        from collectors.workloads.dlrm_presets import preset

        cfg: Any = preset("dlrm_mixed")
    else:
        from collectors.workloads.transformer_shape import TransformerConfig

        cfg = TransformerConfig(arch=workload, layers=2, hidden=64, heads=4, seq_len=64, batch_size=8)
    trainer = make_trainer("dlrm" if workload == "dlrm" else "transformer", cfg, torch.device("cpu"))
    ids = list(range(steps))
    trainer.prepare(ids)
    for k in ids:
        trainer.step(k)   # warm-up: the optimizer's state exists, the allocator's heap has grown

    def run() -> list[float]:
        out = []
        for k in ids:
            start = time.perf_counter_ns()
            trainer.step(k)
            out.append((time.perf_counter_ns() - start) / 1e3)
        return out
    return run


def median_us(fn: Callable[[], Any], reps: int) -> float:
    """Median wall time (µs) of ``reps`` back-to-back calls."""
    out = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        fn()
        out.append((time.perf_counter_ns() - start) / 1e3)
    return float(statistics.median(out))


def probes(reps: int, reads: int) -> Callable[[], dict[str, float]]:
    """The window's microbenchmarks and reads (µs each); buffers allocated once."""
    gen = torch.Generator().manual_seed(0)
    x, w, b = (torch.randn(*s, generator=gen) for s in ((512, 64), (256, 64), (256,)))
    h = torch.randn(8, 64, 64, generator=gen)
    buf16 = torch.ones(16 * 2 ** 20 // 4)
    buf64 = torch.ones(64 * 2 ** 20 // 4)

    def run() -> dict[str, float]:
        out = {"addmm": median_us(lambda: torch.addmm(b, x, w.t()), reps),
               "dropout": median_us(lambda: torch.nn.functional.dropout(h, 0.1, True), reps),
               "layer_norm": median_us(lambda: torch.nn.functional.layer_norm(h, (64,)), reps)}
        for name, buf in (("read16", buf16), ("read64", buf64)):
            buf.sum()   # read just before: what is cached of it stays
            out[name] = median_us(buf.sum, reads)
        return out
    return run


def ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 0..n-1, ties given their mean rank."""
    order = np.argsort(values, kind="stable")
    out = np.empty(len(values))
    out[order] = np.arange(len(values), dtype=float)
    for value in np.unique(values):
        tied = values == value
        if tied.sum() > 1:
            out[tied] = out[tied].mean()
    return out


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (nan below 3 windows or for a constant series)."""
    if len(a) < 3:
        return float("nan")
    ra, rb = ranks(np.asarray(a, float)), ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per series: median, min, max, max/min, slowest quarter over fastest quarter (medians of each), and Spearman's
    rho with the step, over the windows in ``rows``."""
    step = np.array([r["step"] for r in rows], float)
    out = []
    for name in SERIES:
        v = np.array([r[name] for r in rows], float)
        q = max(1, len(v) // 4)
        s = np.sort(v)
        out.append({"series": name, "median": float(np.median(v)), "min": float(s[0]), "max": float(s[-1]),
                    "max_over_min": float(s[-1] / s[0]),
                    "slow_over_fast": float(np.median(s[-q:]) / np.median(s[:q])),
                    "rho_with_step": 1.0 if name == "step" else spearman(v, step)})
    return out


def measure(workload: str, minutes: float, steps: int, reps: int, reads: int, pause_s: float,
            log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Windows until ``minutes`` have passed (at least two)."""
    step, probe = build_step(workload, steps), probes(reps, reads)
    end = time.monotonic() + minutes * 60.0
    rows: list[dict[str, Any]] = []
    while len(rows) < 2 or time.monotonic() < end:
        row: dict[str, Any] = {"at": datetime.now(timezone.utc).strftime("%H:%M:%S"),
                               "step": float(statistics.median(step()))}
        row.update(probe())
        row["load"] = os.getloadavg()[0]
        rows.append(row)
        log(f"{row['at']}  step {row['step'] / 1e3:7.2f} ms  addmm {row['addmm']:6.1f}  dropout {row['dropout']:6.1f}"
            f"  ln {row['layer_norm']:5.1f}  read16 {row['read16']:7.1f}  read64 {row['read64']:7.1f} µs")
        time.sleep(pause_s)
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace, started: str) -> str:
    """The Markdown results: the host, the summary per series, then every window."""
    lines = [f"# The host's pace over minutes ({args.workload}) — {started} UTC", "",
             f"Host: {host_line()}; one thread; {len(rows)} windows, load average {rows[0]['load']:.2f} at the first "
             f"and {rows[-1]['load']:.2f} at the last. `benchmarks/host_phase.py --workload {args.workload} "
             f"--minutes {args.minutes:g} --steps {args.steps} --reps {args.reps}` (diagnosis only: nothing is fitted "
             "on it, no rule chosen by it).", "",
             "| series | median µs | min | max | max / min | slowest / fastest quarter | rank corr. with step |",
             "|---|---|---|---|---|---|---|"]
    for s in summary(rows):
        rho = "-" if s["series"] == "step" else ("n/a" if np.isnan(s["rho_with_step"]) else f"{s['rho_with_step']:+.2f}")
        lines.append(f"| {s['series']} | {s['median']:.1f} | {s['min']:.1f} | {s['max']:.1f} | "
                     f"x{s['max_over_min']:.2f} | x{s['slow_over_fast']:.2f} | {rho} |")
    lines += ["", "Every window (µs):", "", "| UTC | " + " | ".join(SERIES) + " | load |",
              "|---|" + "---|" * (len(SERIES) + 1)]
    for r in rows:
        lines.append(f"| {r['at']} | " + " | ".join(f"{r[n]:.1f}" for n in SERIES) + f" | {r['load']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="bert", help="the step timed (default bert)")
    parser.add_argument("--minutes", type=float, default=15.0, help="how long to measure (default 15)")
    parser.add_argument("--steps", type=int, default=20, help="training steps per window (default 20)")
    parser.add_argument("--reps", type=int, default=60, help="calls per microbenchmark per window (default 60)")
    parser.add_argument("--reads", type=int, default=10, help="reads per buffer per window (default 10)")
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between windows (default 5)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file (default: print only)")
    args = parser.parse_args(argv)
    if args.minutes < 0 or min(args.steps, args.reps, args.reads) < 1 or args.pause < 0:
        print("host_phase: --minutes and --pause must be >= 0; --steps, --reps and --reads at least 1",
              file=sys.stderr)
        return 2
    apply_in_process()
    torch.set_num_threads(1)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
    rows = measure(args.workload, args.minutes, args.steps, args.reps, args.reads, args.pause)
    text = report(rows, args, started)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
