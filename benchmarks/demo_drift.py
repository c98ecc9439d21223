"""What moved between demos on one host: the truths, the microbenchmark prices of the very same shapes, the predictions.

The main job's ground truths of one configuration have moved by 15-35% between fresh-clone demos on the Intel host
(bert ws1 23.0-30.7 ms over four demos of one afternoon) while its predictions moved by under 10%. Either the
prices moved with the truths (and the rule that turns them into a step is what misses) or they did not (the host ran
the step at another pace than the one its microbenchmarks saw). Given two or more `make demo` workspaces of one host,
this prints per run the measured and predicted times of each against the first, and per cache state the ratio of the
same shapes' prices (median over every microbenchmarked configuration both hold, with its quartiles; CPU backward
rows without the engine's call, ``node_us``). Diagnosis only: nothing is fitted on it.

    .venv/bin/python benchmarks/demo_drift.py WS_A WS_B [WS_C ...] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from pmdb_commands import Commands, host_line  # noqa: E402

COMMANDS = Commands("demo_drift")

# one row per workload run of the CPU: its label (random plans named by the plan: seeds may draw one), its truth and
# its latest default-selection model-mode prediction
RUNS = ("SELECT w.name || ' ws' || w.world_size || CASE WHEN w.world_size > 1 THEN ' ' || coalesce(w.sharder, '') "
        "|| CASE WHEN w.sharder = 'random' THEN ' ' || CAST(w.sharding AS VARCHAR) ELSE '' END ELSE '' END AS run, "
        "r.measured_us, (SELECT p.predicted_us FROM predictions p WHERE p.workload_run_id = r.run_id "
        "AND p.mode = 'model' AND p.selection_cache_state = 'default' "
        "ORDER BY p.created_at DESC, p.prediction_id DESC LIMIT 1) AS predicted_us "
        "FROM v_workload_runs r JOIN workloads w USING (workload_id) WHERE r.platform LIKE 'cpu-%' "
        "ORDER BY r.finished_at")
PRICES = ("SELECT cache_state, config_key, median(coalesce(node_us, median_us)) AS us FROM v_op_measurements "
          "WHERE source = 'microbenchmark' AND (skipped IS NULL OR skipped = '') AND median_us > 0 "
          "AND platform LIKE 'cpu-%' GROUP BY cache_state, config_key")


def _read(home: Path, log: list[str]) -> tuple[dict[str, dict], dict[tuple[str, str], float]]:
    runs: dict[str, dict] = {}
    for row in COMMANDS.sql(home, RUNS, log):   # a workload run again (a seed drawing a plan twice): the first
        runs.setdefault(row["run"], row)
    prices = {(row["cache_state"], row["config_key"]): float(row["us"]) for row in COMMANDS.sql(home, PRICES, log)}
    return runs, prices


def _ratio(value: float | None, base: float | None) -> str:
    return "-" if not value or not base else f"{value / base:.3f}"


def tables(homes: list[Path], log: list[str]) -> list[str]:
    """The Markdown sections: runs against the first workspace, then prices per cache state."""
    read = [_read(home, log) for home in homes]
    base_runs, base_prices = read[0]
    out = ["## Runs (ratios against the first workspace)", "",
           "| run | " + " | ".join(f"measured {i}" for i in range(len(homes))) + " | "
           + " | ".join(f"predicted {i}" for i in range(len(homes))) + " |",
           "|---|" + "---|" * (2 * len(homes))]
    for name, base in sorted(base_runs.items()):
        measured = [_ratio(runs.get(name, {}).get("measured_us"), base["measured_us"]) for runs, _ in read]
        predicted = [_ratio(runs.get(name, {}).get("predicted_us"), base["predicted_us"]) for runs, _ in read]
        measured[0] = f"{base['measured_us'] / 1e3:.2f} ms"
        predicted[0] = "-" if not base["predicted_us"] else f"{base['predicted_us'] / 1e3:.2f} ms"
        out.append(f"| {name} | " + " | ".join(measured) + " | " + " | ".join(predicted) + " |")
    out += ["", "## Prices of the same shapes (ratio to the first workspace's: median, q25-q75, shapes)", "",
            "| workspace | cache state | median | q25-q75 | shapes |", "|---|---|---|---|---|"]
    for i, (_, prices) in enumerate(read[1:], start=1):
        for state in sorted({s for s, _ in prices}):
            ratios = sorted(prices[key] / base_prices[key] for key in prices
                            if key[0] == state and key in base_prices and base_prices[key] > 0)
            if len(ratios) < 4:
                continue
            q = statistics.quantiles(ratios, n=4)
            out.append(f"| {i} | {state} | {statistics.median(ratios):.3f} | {q[0]:.3f}-{q[2]:.3f} | {len(ratios)} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workspaces", type=Path, nargs="+",
                        help="two or more demo workspaces of one host, oldest first")
    parser.add_argument("--out", type=Path, help="write the tables to this Markdown file too")
    args = parser.parse_args()
    if len(args.workspaces) < 2:
        parser.error("give two or more workspaces")
    missing = [str(w) for w in args.workspaces if not (w / "pmdb.duckdb").exists()]
    if missing:
        parser.error(f"not a pmdb workspace: {', '.join(missing)}")
    log: list[str] = []
    lines = [f"# What moved between demos — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; workspaces: " + ", ".join(f"{i} `{w}`" for i, w in enumerate(args.workspaces)),
             "", *tables(list(args.workspaces), log)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
