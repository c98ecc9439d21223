"""How far one host's ground truth moves when the same run is measured again: the error floor under any model.

The main job judges each prediction against one truth per run (`make demo`: the median of 3-5 launches of fresh
processes, each the median of its timed iterations). A host whose truth of one configuration moves by more than the
target's margin from one collection to the next caps what any model can show there. This collects the same
workloads ``--repeats`` times back to back in one empty workspace, with the quickstart's arguments
(``pmdb.cli.quickstart``), and prints per workload the stored truths in order, their median, range and the share of
them within ±10 % of that median (what the best single prediction could reach, looking at the truths). Nothing is
fitted or predicted.

    .venv/bin/python benchmarks/truth_repeat.py [--repeats 6] [--workload dlrm-ws1 --workload bert-ws1] [--out F.md]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=6, help="collections of each workload (default 6)")
    parser.add_argument("--workload", action="append", default=None,
                        help="a quickstart workload step (repeatable; default dlrm-ws1 and bert-ws1)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file (default: print only)")
    args = parser.parse_args(argv)
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
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
