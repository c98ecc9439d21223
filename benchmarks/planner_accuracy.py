"""Planner accuracy: fit the planner calibration on the train split of the shared Megatron-DeepSpeed runs, report
held-out MAPE/GMAE overall and by tp, pp, dp, micro-batch, GPUs and model size; write a Markdown report.

Usage: python benchmarks/planner_accuracy.py [--shared ../shared] [--seeds 0,1,2] [--output FILE]
The fit never sees a held-out run (split by configuration, seeded). Also times a full 1D search (GPT-3-1T on
2048 A100s, calibrated) against the < 1 s target.
"""
from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pmdb import metrics  # noqa: E402
from planner import fitting  # noqa: E402
from planner.candidates import framework  # noqa: E402
from planner.model import PRESETS  # noqa: E402
from planner.search import search  # noqa: E402
from planner.system import load  # noqa: E402
from planner.validate import read_runs, validate  # noqa: E402

SAMPLE = "data/megatron_runs/a100_single_node_sample.csv"
TARGET_MAPE = 0.08


def _md(frame: pd.DataFrame) -> str:
    """A Markdown table (no tabulate dependency)."""
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def _by(rows: pd.DataFrame, column: str) -> pd.DataFrame:
    """Held-out MAPE/GMAE (%) and mean signed error per value of ``column``."""
    out = []
    for value, group in rows.groupby(column):
        s = metrics.summary(group["predicted_s"], group["measured_s"])
        out.append({column: value, "runs": s["n"], "MAPE %": round(100 * s["mape"], 1),
                    "GMAE %": round(100 * s["gmae"], 1),
                    "mean signed %": round(100 * float(group["rel_error"].mean()), 1)})
    return pd.DataFrame(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared",
                        help="The shared folder holding data/megatron_runs/ (default ../shared).")
    parser.add_argument("--seeds", default="0,1,2", help="Comma-separated split seeds; the first one is detailed.")
    parser.add_argument("--system", default="a100", help="Shipped system the runs were measured on.")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "planner_accuracy.md",
                        help="Markdown report to write.")
    args = parser.parse_args(argv)
    path = args.shared / SAMPLE
    if not path.is_file():
        parser.error(f"no measured runs at {path} (give --shared)")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    runs = read_runs(path)
    base, fw = load(args.system), framework("megatron-deepspeed")
    uncal = validate(runs, base, fw, vocab=50257)

    per_seed, detail = [], None
    for seed in seeds:
        result = fitting.fit(runs, base, fw, vocab=50257, seed=seed)
        before = metrics.summary(uncal.rows["predicted_s"][result.test], runs["measured_s"][result.test])
        per_seed.append({"seed": seed, "train runs": int(result.train.sum()), "test runs": int(result.test.sum()),
                         "train MAPE %": round(100 * result.train_summary["mape"], 1),
                         "test MAPE %": round(100 * result.test_summary["mape"], 1),
                         "test GMAE %": round(100 * result.test_summary["gmae"], 1),
                         "test max %": round(100 * result.test_summary["max"], 1),
                         "uncalibrated test MAPE %": round(100 * before["mape"], 1),
                         "fit s": round(result.fit_seconds, 1), "evaluations": result.evaluations})
        if detail is None:
            detail = result
        print(per_seed[-1], flush=True)

    rows = runs[detail.test].copy()
    rows["predicted_s"] = detail.predicted_s[detail.test]
    rows["rel_error"] = metrics.relative_errors(rows["predicted_s"], rows["measured_s"])
    rows["model size"] = [f"h{h} l{n} ({(12 * h * h * n + 50257 * h) / 1e9:.2f}B)"
                          for h, n in zip(rows["hidden"], rows["layers"])]
    counts, edges = np.histogram(100 * rows["rel_error"], bins=[-100, -30, -20, -10, -5, 0, 5, 10, 20, 30, 1000])
    hist = pd.DataFrame({"error": [f"[{lo:g}%, {hi:g}%)" for lo, hi in zip(edges[:-1], edges[1:])],
                         "runs": counts})

    cal = fitting.PlannerCalibration(detail.calibration.params)
    search(PRESETS["gpt3-1t"], cal.system(base), 2048, 2048, strategy="1d", fw=fw, calibration=cal, progress=False)
    start = time.perf_counter()
    found = search(PRESETS["gpt3-1t"], cal.system(base), 2048, 2048, strategy="1d", fw=fw, calibration=cal,
                   progress=False)
    search_s = time.perf_counter() - start

    table = pd.DataFrame(per_seed)
    mean_mape = float(table["test MAPE %"].mean())
    params = pd.DataFrame([{"parameter": k, "value": round(v, 4), "unit": fitting.PARAMS[k][3]}
                           for k, v in detail.calibration.params.items()])
    lines = [
        "# Planner accuracy: calibrated planner on held-out Megatron-DeepSpeed A100 runs", "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.node()} ({os.cpu_count()} CPUs), load average (1 min) {os.getloadavg()[0]:.2f}",
        f"- data: `{SAMPLE}` ({len(runs)} runs, one 8×A100 node); system `{args.system}`, framework "
        f"megatron-deepspeed, full recomputation",
        f"- calibration: {len(fitting.PARAMS)} fitted parameters (planner/fitting.py), split by configuration, "
        f"20% held out, seeds {args.seeds}",
        f"- uncalibrated planner on all {len(runs)} runs: MAPE {100 * uncal.summary['mape']:.1f}%, "
        f"GMAE {100 * uncal.summary['gmae']:.1f}%",
        f"- held-out MAPE, mean over seeds: {mean_mape:.1f}% (target < {100 * TARGET_MAPE:.0f}%, anchor vTrain "
        f"8.37%): {'met' if mean_mape < 100 * TARGET_MAPE else 'NOT met'}",
        f"- full 1D search GPT-3-1T on 2048 A100s with the calibration: {search_s:.2f} s for {found.evaluated} "
        f"configurations (target < 1 s)", "",
        "## Held-out errors per seed", "", _md(table), "",
        f"## Seed {detail.seed}: fitted parameters", "", _md(params), "",
    ]
    for column in ("tp", "pp", "dp", "micro_batch", "gpus", "model size"):
        lines += [f"## Seed {detail.seed}: held out by {column}", "", _md(_by(rows, column)), ""]
    lines += [f"## Seed {detail.seed}: held-out error histogram (predicted/measured − 1)", "",
              _md(hist), ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print(f"wrote {args.output}: held-out MAPE {mean_mape:.1f}% (mean over seeds), search {search_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
