"""How much a bmm's operand layout costs on this host: the same shape with row-major operands (nn), the second
stored transposed (nt: BT = 1, z · z^T's layout), the first (tn: AT = 1) and both (tt), one thread, CPU.

Why pmdb prices a bmm in the layout its execution trace recorded (``pmdb.traces.layout``, RULES_VERSION 8): the
microbenchmark used to build row-major operands only. Each shape is timed in repeated windows of ``--calls`` calls
after a warm-up (operands in cache, back to back); the figure is the median over windows of each window's median,
with the lowest and highest window median beside it. Nothing here is fitted on.

    .venv/bin/python benchmarks/bmm_layouts.py [--out FILE.md] [--windows 5] [--calls 60]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from pmdb_commands import host_line  # noqa: E402

# (B, M, K, N): DLRM mixed's interaction at batch 256 and 128 (7 vectors of 64), attention-like, larger
SHAPES = ((256, 7, 64, 7), (128, 7, 64, 7), (96, 128, 64, 128), (8, 256, 256, 256), (1, 512, 512, 512))
LAYOUTS = ("nn", "nt", "tn", "tt")


def operands(b: int, m: int, k: int, n: int, layout: str):
    """x [b, m, k] and y [b, k, n], each row-major or the transposed view of a row-major tensor."""
    import torch

    x = torch.randn(b, k, m).transpose(1, 2) if layout[0] == "t" else torch.randn(b, m, k)
    y = torch.randn(b, n, k).transpose(1, 2) if layout[1] == "t" else torch.randn(b, k, n)
    return x, y


def window_medians(shape: tuple[int, int, int, int], layout: str, windows: int, calls: int) -> list[float]:
    """Median µs of ``calls`` back-to-back calls, per window."""
    import torch

    x, y = operands(*shape, layout)
    out = []
    for _ in range(windows):
        for _ in range(5):
            torch.bmm(x, y)
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            torch.bmm(x, y)
            times.append((time.perf_counter() - start) * 1e6)
        out.append(statistics.median(times))
    return out


def table(windows: int, calls: int) -> list[str]:
    lines = ["| B, M, K, N | " + " | ".join(f"{lay} µs (low-high)" for lay in LAYOUTS) + " | nt / nn | tn / nn |",
             "|---|" + "---|" * (len(LAYOUTS) + 2)]
    for shape in SHAPES:
        meds = {lay: window_medians(shape, lay, windows, calls) for lay in LAYOUTS}
        mid = {lay: statistics.median(v) for lay, v in meds.items()}
        cells = [f"{mid[lay]:.0f} ({min(meds[lay]):.0f}-{max(meds[lay]):.0f})" for lay in LAYOUTS]
        lines.append(f"| {', '.join(map(str, shape))} | " + " | ".join(cells)
                     + f" | {mid['nt'] / mid['nn']:.2f} | {mid['tn'] / mid['nn']:.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="append the table to this Markdown file")
    parser.add_argument("--windows", type=int, default=5, help="windows per shape and layout (default 5)")
    parser.add_argument("--calls", type=int, default=60, help="calls per window (default 60)")
    args = parser.parse_args(argv)
    if args.windows < 1 or args.calls < 1:
        print("bmm_layouts: --windows and --calls must be at least 1", file=sys.stderr)
        return 2
    import torch

    torch.set_num_threads(1)
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()[0]
    lines = table(args.windows, args.calls)
    head = [f"## {started}", "", f"Host: {host_line()}; load average {load:.2f} at start, "
            f"{os.getloadavg()[0]:.2f} at the end; torch {torch.__version__}, one thread; median of "
            f"{args.windows} windows of {args.calls} calls (lowest-highest window median in brackets).", ""]
    text = "\n".join(head + lines) + "\n"
    print(text)
    if args.out is not None:
        if not args.out.exists():
            why = __doc__.split("\n\n")[1]
            args.out.write_text(f"# bmm operand layouts on a CPU (benchmarks/bmm_layouts.py)\n\n{why}\n\n")
        with args.out.open("a") as handle:
            handle.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
