"""How far one host's ground truth moves when the same run is measured again: the error floor under any model.

The main job judges each prediction against one truth per run (`make demo`: the median of 3-5 launches of fresh
processes, each the median of its timed iterations). A host whose truth of one configuration moves by more than the
target's margin from one collection to the next caps what any model can show there. This collects the same
workloads ``--repeats`` times back to back in one empty workspace, with the quickstart's arguments
(``pmdb.cli.quickstart``), and prints per workload the stored truths in order, their median, range and the share of
them within ±10 % of that median (what the best single prediction could reach, looking at the truths). Nothing is
fitted or predicted.

A second table asks whether another statistic of the same stored iterations would hold still: per collection the
10th percentile and the fastest of its iterations (pooled over its launches; each iteration the slowest rank), and
the share of its iterations more than 25 % above that 10th percentile (a slower regime of the host: on the 48 MiB-L3
Intel host a fixed GEMM runs at one of two speeds, ~45 % apart, in phases of one to a few seconds). It is a
diagnosis of the host, not a truth pmdb uses. ``--from WS`` reads the collections already in a workspace instead of
collecting (every completed workload run with stored iterations, grouped by workload and world size).

    .venv/bin/python benchmarks/truth_repeat.py [--repeats 6] [--workload dlrm-ws1 --workload bert-ws1] [--out F.md]
    .venv/bin/python benchmarks/truth_repeat.py --from /tmp/truth_repeat_XXXX/ws [--out F.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import Commands, host_line  # noqa: E402

COMMANDS = Commands("truth_repeat")
MARGIN = 0.10   # the main job's single-rank target: within 10 %
SLOWER = 1.25  # an iteration this much above its collection's 10th percentile counts as run in a slower regime
# every completed workload run's stored truth and its iterations (each the slowest rank), oldest first
ITERATIONS = ("SELECT w.name || ' ws' || w.world_size AS workload, r.run_id, r.measured_us, "
              "list(e.time_us ORDER BY e.iteration) AS times_us FROM workload_runs r "
              "JOIN workloads w USING (workload_id) JOIN collection_runs c USING (run_id) "
              "JOIN (SELECT run_id, iteration, max(time_us) AS time_us FROM e2e_measurements GROUP BY ALL) e "
              "USING (run_id) WHERE c.status = 'completed' AND r.measured_us IS NOT NULL "
              "GROUP BY ALL ORDER BY min(c.started_at)")
TRUTH = ("SELECT CAST(summary->>'$.measured_us' AS DOUBLE) AS measured_us FROM collection_runs "
         "WHERE kind = 'workload' AND status = 'completed' ORDER BY finished_at DESC LIMIT 1")


def workloads() -> dict[str, tuple[str, ...]]:
    """The quickstart's workload steps that measure a truth, by name ('dlrm-ws1', 'bert-ws1', ...): their `pmdb`
    arguments (a shape-only capture measures none)."""
    from pmdb.cli.quickstart import steps

    return {s.name: s.args for s in steps("reports")
            if s.args[:2] == ("collect", "workload") and "--graph-only" not in s.args}


def within(values: list[float], centre: float, margin: float = MARGIN) -> float:
    """The share of ``values`` within ``margin`` (a fraction) of ``centre``."""
    return sum(abs(v / centre - 1.0) <= margin for v in values) / len(values)


def summary_row(name: str, truths_us: list[float]) -> str:
    """One Markdown row: the truths (ms) in order, their median, (max - min) / median and the share within ±10 %."""
    centre = statistics.median(truths_us)
    spread = (max(truths_us) - min(truths_us)) / centre
    shown = " / ".join(f"{t / 1e3:.2f}" for t in truths_us)
    return (f"| {name} | {shown} | {centre / 1e3:.2f} | {min(truths_us) / centre - 1:+.1%} … "
            f"{max(truths_us) / centre - 1:+.1%} ({spread:.0%}) | {within(truths_us, centre):.0%} |")


def spread(values: list[float]) -> float:
    """(max - min) / median of ``values``."""
    return (max(values) - min(values)) / statistics.median(values)


def estimator_row(name: str, truths_us: list[float], iterations_us: list[list[float]]) -> str:
    """One Markdown row: per collection of ``name``, the spread across collections of its truth, of its iterations'
    10th percentile and of its fastest iteration, and the range of its share of iterations in a slower regime."""
    import numpy as np

    p10 = [float(np.percentile(times, 10)) for times in iterations_us]
    fastest = [min(times) for times in iterations_us]
    slow = [sum(t > SLOWER * low for t in times) / len(times) for times, low in zip(iterations_us, p10)]
    shown = " / ".join(f"{v / 1e3:.2f}" for v in p10)
    return (f"| {name} | {len(truths_us)} | {spread(truths_us):.0%} | {shown} | {spread(p10):.0%} | "
            f"{spread(fastest):.0%} | {min(slow):.0%}-{max(slow):.0%} |")


def estimator_table(rows: dict[str, list[tuple[float, list[float]]]]) -> list[str]:
    """The second table (see the module's docstring) from (truth µs, iterations µs) per collection, by workload."""
    lines = ["| workload | collections | truth spread | 10th percentile per collection (ms) | its spread | "
             "fastest's spread | iterations > 1.25 x the 10th percentile |", "|---|---|---|---|---|---|---|"]
    return lines + [estimator_row(name, [t for t, _ in runs], [times for _, times in runs])
                    for name, runs in rows.items() if len(runs) >= 2]


def stored_collections(home: Path, log: list[str]) -> dict[str, list[tuple[float, list[float]]]]:
    """(truth µs, iterations µs) of every completed workload run in the workspace, by 'name wsN', oldest first."""
    rows: dict[str, list[tuple[float, list[float]]]] = {}
    for row in COMMANDS.sql(home, ITERATIONS, log):
        times = row["times_us"]
        times = [float(t) for t in (times if isinstance(times, list) else str(times).strip("[]").split(","))]
        rows.setdefault(row["workload"], []).append((float(row["measured_us"]), times))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=6, help="collections of each workload (default 6)")
    parser.add_argument("--workload", action="append", default=None,
                        help="a quickstart workload step (repeatable; default dlrm-ws1 and bert-ws1)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file (default: print only)")
    parser.add_argument("--from", dest="from_ws", type=Path, default=None,
                        help="read the collections stored in this workspace instead of collecting")
    args = parser.parse_args(argv)
    if args.from_ws is not None:
        return from_workspace(args.from_ws, args.out)
    known = workloads()
    chosen = args.workload or ["dlrm-ws1", "bert-ws1"]
    unknown = [w for w in chosen if w not in known]
    if unknown or args.repeats < 2:
        print(f"truth_repeat: {'unknown workload ' + ', '.join(unknown) if unknown else '--repeats below 2'} "
              f"(known: {', '.join(sorted(known))})", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="truth_repeat_")) / "ws"
    log: list[str] = []
    started = datetime.now(timezone.utc)
    COMMANDS.run(home, "init", log=log)
    truths: dict[str, list[float]] = {w: [] for w in chosen}
    begun = time.monotonic()
    for _ in range(args.repeats):   # interleaved: each workload's collections spread over the whole benchmark
        for name in chosen:
            COMMANDS.run(home, *known[name], log=log)
            truths[name].append(float(COMMANDS.sql(home, TRUTH, log)[0]["measured_us"]))
    lines = [f"# The same truth measured again — {started:%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; {args.repeats} collections of each workload, interleaved, back to back in "
             f"{(time.monotonic() - begun) / 60:.1f} min (`benchmarks/truth_repeat.py`, the quickstart's arguments).",
             "", "| workload | truths, in order (ms) | median | range (spread) | within ±10 % of the median |",
             "|---|---|---|---|---|"]
    lines += [summary_row(name, values) for name, values in truths.items()]
    lines += ["", "Other statistics of the same iterations (diagnosis only, see the script's docstring):", ""]
    lines += estimator_table(stored_collections(home, log))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


def from_workspace(home: Path, out: Path | None) -> int:
    """The two tables from the collections already stored in ``home``."""
    log: list[str] = []
    if not (home / "pmdb.duckdb").is_file():
        print(f"truth_repeat: no pmdb workspace at {home}", file=sys.stderr)
        return 2
    rows = stored_collections(home, log)
    lines = [f"# The same truth measured again — read from {home} at {datetime.now(timezone.utc):%Y-%m-%d %H:%M} "
             "UTC", "", "| workload | truths, in order (ms) | median | range (spread) | within ±10 % of the median |",
             "|---|---|---|---|---|"]
    lines += [summary_row(name, [t for t, _ in runs]) for name, runs in rows.items()]
    lines += ["", *estimator_table(rows)]
    text = "\n".join(lines) + "\n"
    print(text)
    if out:
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
