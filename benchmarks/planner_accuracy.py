"""Planner accuracy: fit ONE planner calibration on single- and multi-node Megatron-DeepSpeed runs together and
report held-out MAPE/GMAE of single-node and multi-node runs side by side (k-fold cross-validation), overall and by
tp, pp, dp, micro-batch, GPUs and model size; write a Markdown report.

Usage: python benchmarks/planner_accuracy.py [--shared ../shared] [--folds 5] [--output FILE]
Fold k holds out the single-node configurations of split seed k (20%) and every k-th multi-node configuration of
a seeded permutation (all multi-node runs are held out once over the folds); the fit never sees a held-out run.
For comparison: the uncalibrated planner, and a calibration fitted on single-node runs only (multi-node unseen).
Also times a full 1D search (GPT-3-1T on 2048 A100s, calibrated) against the < 1 s target.
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
MULTI = "data/megatron_runs/a100_multi_node_sample.csv"
TARGETS = {"single": 0.07, "multi": 0.10}


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


def _folds(single: pd.DataFrame, multi: pd.DataFrame, k: int) -> list[np.ndarray]:
    """Held-out masks over single + multi runs, one per fold (see the module docstring)."""
    keys = multi[list(fitting.CONFIG_COLUMNS)].astype(str).agg("/".join, axis=1)
    unique = np.array(sorted(keys.unique()))
    order = np.random.default_rng(0).permutation(len(unique))
    out = []
    for fold in range(k):
        _, single_test = fitting.split_runs(single, fold)
        multi_test = keys.isin(set(unique[order[fold::k]])).to_numpy()
        out.append(np.concatenate([single_test, multi_test]))
    return out


def _pct(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    s = metrics.summary(pred, meas)
    return {"MAPE %": round(100 * s["mape"], 1), "GMAE %": round(100 * s["gmae"], 1), "max %": round(100 * s["max"], 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared",
                        help="The shared folder holding data/megatron_runs/ (default ../shared).")
    parser.add_argument("--folds", type=int, default=5, help="Cross-validation folds; the first one is detailed.")
    parser.add_argument("--system", default="a100", help="Shipped system the runs were measured on.")
    parser.add_argument("--output", type=Path, default=ROOT / "benchmarks" / "results" / "planner_accuracy.md",
                        help="Markdown report to write.")
    args = parser.parse_args(argv)
    paths = [args.shared / SAMPLE, args.shared / MULTI]
    for path in paths:
        if not path.is_file():
            parser.error(f"no measured runs at {path} (give --shared)")
    single, multi = read_runs(paths[0]), read_runs(paths[1])
    runs = pd.concat([single, multi], ignore_index=True)
    is_multi = np.arange(len(runs)) >= len(single)
    base, fw = load(args.system), framework("megatron-deepspeed")
    uncal = validate(runs, base, fw, vocab=50257).rows["predicted_s"].to_numpy()
    measured = runs["measured_s"].to_numpy()

    per_fold, held = [], np.full(len(runs), np.nan)
    detail = None
    for fold, test in enumerate(_folds(single, multi, args.folds)):
        result = fitting.fit(runs, base, fw, vocab=50257, test=test)
        alone = fitting.fit(single, base, fw, vocab=50257, test=test[~is_multi])
        alone_multi = fitting.predict(multi, base, fw, alone.calibration, vocab=50257)
        held[test] = result.predicted_s[test]
        row: dict[str, object] = {"fold": fold, "train runs": int(result.train.sum())}
        for label, mask in (("single", test & ~is_multi), ("multi", test & is_multi)):
            row[f"{label} held out"] = int(mask.sum())
            row[f"{label} MAPE %"] = _pct(result.predicted_s[mask], measured[mask])["MAPE %"]
            row[f"{label} uncal. %"] = _pct(uncal[mask], measured[mask])["MAPE %"]
        row["single-only fit: single %"] = _pct(alone.predicted_s[alone.test], single["measured_s"][alone.test])[
            "MAPE %"]
        row["single-only fit: multi %"] = _pct(alone_multi, multi["measured_s"].to_numpy())["MAPE %"]
        row["fit s"] = round(result.fit_seconds, 1)
        per_fold.append(row)
        detail = detail or result
        print(row, flush=True)

    table = pd.DataFrame(per_fold)
    means = {label: float(table[f"{label} MAPE %"].mean()) for label in TARGETS}
    pooled = {label: _pct(held[mask], measured[mask]) for label, mask in
              (("single", ~is_multi & ~np.isnan(held)), ("multi", is_multi & ~np.isnan(held)))}
    rows = runs[detail.test].copy()
    rows["predicted_s"] = detail.predicted_s[detail.test]
    rows["rel_error"] = metrics.relative_errors(rows["predicted_s"], rows["measured_s"])
    rows["nodes"] = np.where(is_multi[detail.test], "multi", "single")
    rows["model size"] = [f"h{h} l{n} ({(12 * h * h * n + 50257 * h) / 1e9:.2f}B)"
                          for h, n in zip(rows["hidden"], rows["layers"])]
    multi_rows = runs[is_multi].assign(predicted_s=held[is_multi])
    multi_rows["rel_error"] = metrics.relative_errors(multi_rows["predicted_s"], multi_rows["measured_s"])
    counts, edges = np.histogram(100 * rows["rel_error"], bins=[-100, -30, -20, -10, -5, 0, 5, 10, 20, 30, 1000])
    hist = pd.DataFrame({"error": [f"[{lo:g}%, {hi:g}%)" for lo, hi in zip(edges[:-1], edges[1:])],
                         "runs": counts})

    cal = fitting.PlannerCalibration(detail.calibration.params)
    search(PRESETS["gpt3-1t"], cal.system(base), 2048, 2048, strategy="1d", fw=fw, calibration=cal, progress=False)
    start = time.perf_counter()
    found = search(PRESETS["gpt3-1t"], cal.system(base), 2048, 2048, strategy="1d", fw=fw, calibration=cal,
                   progress=False)
    search_s = time.perf_counter() - start

    params = pd.DataFrame([{"parameter": k, "value": round(v, 4), "unit": fitting.PARAMS[k][3]}
                           for k, v in detail.calibration.params.items()])
    verdict = ", ".join(f"{label} {means[label]:.1f}% (target < {100 * t:.0f}%: "
                        f"{'met' if means[label] < 100 * t else 'NOT met'})" for label, t in TARGETS.items())
    lines = [
        "# Planner accuracy: one calibration, held-out single- and multi-node Megatron-DeepSpeed A100 runs", "",
        f"- date: {dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.node()} ({os.cpu_count()} CPUs), load average (1 min) {os.getloadavg()[0]:.2f}",
        f"- data: `{SAMPLE}` ({len(single)} runs, one 8×A100 node, seq 1024) and `{MULTI}` ({len(multi)} runs, "
        f"64–512 A100s, seq 2048); system `{args.system}`, framework megatron-deepspeed, full recomputation",
        f"- calibration: the parameters of planner/fitting.py the training runs identify, fitted on single- and "
        f"multi-node training runs together; {args.folds}-fold cross-validation by configuration (single: 20% "
        f"held out per fold, split seed = fold; multi: every {args.folds}th configuration, each held out once)",
        f"- held-out MAPE, mean over folds: {verdict}",
        f"- pooled over the folds (each run predicted by the fold that held it out): single MAPE "
        f"{pooled['single']['MAPE %']}% GMAE {pooled['single']['GMAE %']}%; multi MAPE {pooled['multi']['MAPE %']}% "
        f"GMAE {pooled['multi']['GMAE %']}% (max {pooled['multi']['max %']}%)",
        f"- uncalibrated planner: single MAPE {_pct(uncal[~is_multi], measured[~is_multi])['MAPE %']}%, multi "
        f"{_pct(uncal[is_multi], measured[is_multi])['MAPE %']}%; fitted on single-node runs only (inter-node "
        f"network left at the system file): multi {table['single-only fit: multi %'].mean():.1f}% (mean over folds)",
        f"- full 1D search GPT-3-1T on 2048 A100s with the calibration: {search_s:.2f} s for {found.evaluated} "
        f"configurations (target < 1 s)", "",
        "## Held-out errors per fold", "", _md(table), "",
        f"## Fold {detail.seed} (first): fitted parameters", "", _md(params), "",
        "## Every multi-node run, predicted by the fold that held it out", "",
        _md(multi_rows[["gpus", "hidden", "layers", "tp", "dp", "pp", "micro_batch", "measured_s", "predicted_s",
                        "rel_error"]].round({"measured_s": 2, "predicted_s": 2, "rel_error": 3})), "",
    ]
    for column in ("nodes", "tp", "pp", "dp", "micro_batch", "gpus", "model size"):
        lines += [f"## First fold: held out by {column}", "", _md(_by(rows, column)), ""]
    lines += ["## First fold: held-out error histogram (predicted/measured − 1)", "", _md(hist), ""]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines))
    print(f"wrote {args.output}: held-out MAPE {verdict}; search {search_s:.2f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
