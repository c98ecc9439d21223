"""Whether this host runs at two speeds: one fixed op timed back to back, in windows of a fraction of a second.

Diagnosis for the main job (issue #36): nothing is fitted on it and no rule is chosen by it. One thread times a
256x256 FP32 GEMM (operands in L2) back to back for ``--seconds``; each ``--window`` seconds give one median (µs).
On a host whose speed is steady the window medians lie within a few percent of each other. On a shared host whose
neighbour takes a core's resources in phases they split into a fast and a slow level; a training step of tens of
milliseconds then runs wholly in one or the other, and a truth that is the median of a few seconds of steps lands on
either level or between them, depending on how the phases fell while it was measured.

Printed: the window medians in order (µs); the fastest decile of them (the fast level), the share of windows more
than 25 % slower than it, the median of those (the slow level), and how long the slow phases lasted (runs of
consecutive slow windows, in seconds).

    .venv/bin/python benchmarks/host_two_speeds.py [--seconds 30] [--window 0.2] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import emit, host_line  # noqa: E402

SIZE = 256       # the GEMM's M = N = K
SLOWER = 1.25    # a window this much above the fast level counts as slow


def window_medians(seconds: float, window: float) -> list[float]:
    """Median µs of one GEMM call per ``window`` seconds, for ``seconds`` seconds (on torch's threads as set: main
    sets one)."""
    a, b = torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)
    for _ in range(20):
        torch.mm(a, b)
    medians: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        calls: list[float] = []
        stop = time.perf_counter() + window
        while time.perf_counter() < stop:
            start = time.perf_counter()
            torch.mm(a, b)
            calls.append((time.perf_counter() - start) * 1e6)
        medians.append(statistics.median(calls))
    return medians


def slow_runs(slow: list[bool], window: float) -> list[float]:
    """Lengths (s) of the runs of consecutive slow windows."""
    runs, length = [], 0
    for flag in [*slow, False]:
        if flag:
            length += 1
        elif length:
            runs.append(length * window)
            length = 0
    return runs


def report(medians: list[float], window: float, started: datetime, seconds: float) -> str:
    """The Markdown text (see the module's docstring)."""
    fast = float(np.percentile(medians, 10))
    slow = [m > SLOWER * fast for m in medians]
    slow_level = statistics.median([m for m, s in zip(medians, slow) if s]) if any(slow) else float("nan")
    runs = slow_runs(slow, window)
    shown = " ".join(f"{m:.0f}" for m in medians)
    lines = [f"# Does this host run at two speeds? — {started:%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; one thread; a {SIZE}x{SIZE}x{SIZE} FP32 GEMM back to back for {seconds:.0f} s, "
             f"the median of each {window:.1f} s window (`benchmarks/host_two_speeds.py`).", "",
             "| windows | fast level µs (10th percentile) | slow windows (> 1.25x) | slow level µs | slow / fast | "
             "slow phases: count, median s, longest s |", "|---|---|---|---|---|---|",
             f"| {len(medians)} | {fast:.1f} | {sum(slow) / len(slow):.0%} | {slow_level:.1f} | "
             f"{slow_level / fast:.2f} | {len(runs)}, {statistics.median(runs) if runs else 0:.1f}, "
             f"{max(runs) if runs else 0:.1f} |", "", "Window medians in order (µs):", "", shown]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="how long to time (default 30)")
    parser.add_argument("--window", type=float, default=0.2, help="seconds per window median (default 0.2)")
    parser.add_argument("--out", type=Path, default=None, help="append the Markdown to this file (default: print)")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or not 0 < args.window <= args.seconds:
        print("host_two_speeds: --seconds must be positive and --window within (0, --seconds]", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    started = datetime.now(timezone.utc)
    text = report(window_medians(args.seconds, args.window), args.window, started, args.seconds)
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
