"""Which element-wise ops cost more on some values than on others? Times each op of a list on inputs of one size
filled four ways — uniform in (0, 1), exact zeros, tiny values (1e-30: normal floats, far from zero) and ones —
interleaved (every op and fill once per round), one intra-op thread, outputs preallocated (``out=``, so no
allocation or page fault enters the time), median of the rounds with the spread ((p90 - p10) / median) beside it.

    .venv/bin/python benchmarks/value_sensitivity.py [--numel 4194304] [--rounds 15]

pmdb's microbenchmarks feed random values; an op whose cost depends on the values is mispriced where a step feeds it
others. Found so far on the AMD host: ``torch.sqrt`` of exact zeros ~4x slower than of random values, which an
Adam step meets in the second moment of a token embedding (pmdb records that zero share with every workload run,
``optimizer_state_stats``, and prices the step's sqrt at it). Writes a Markdown table (default
benchmarks/results/value_sensitivity_<platform>.md) and prints it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pmdb import platform as platforms  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
FILLS: dict[str, Callable[[torch.Tensor], None]] = {
    "uniform": lambda x: x.uniform_(0.0, 1.0, generator=torch.Generator().manual_seed(0)),
    "zeros": lambda x: x.zero_(),
    "tiny": lambda x: x.fill_(1e-30),
    "ones": lambda x: x.fill_(1.0),
}


def _ops(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> dict[str, Callable[[], object]]:
    """name -> one call on ``x`` (and ``y``, which stays uniform), writing into ``out``."""
    return {
        "sqrt": lambda: torch.sqrt(x, out=out), "rsqrt": lambda: torch.rsqrt(x, out=out),
        "pow 0.5": lambda: torch.pow(x, 0.5, out=out), "exp": lambda: torch.exp(x, out=out),
        "log": lambda: torch.log(x, out=out), "tanh": lambda: torch.tanh(x, out=out),
        "sigmoid": lambda: torch.sigmoid(x, out=out), "relu": lambda: torch.clamp_min(x, 0.0, out=out),
        "div (y / x)": lambda: torch.div(y, x, out=out), "mul": lambda: torch.mul(x, y, out=out),
        "add": lambda: torch.add(x, y, out=out), "addcdiv (y + y / x)": lambda: torch.addcdiv(y, y, x, out=out),
        # an Adam step's other ops on its state x (y: the gradient), out of place so that x keeps its values
        "div (x / 3)": lambda: torch.div(x, 3.0, out=out), "add (x + 1e-8)": lambda: torch.add(x, 1e-8, out=out),
        "mul (x * 0.999)": lambda: torch.mul(x, 0.999, out=out), "lerp (x to y)": lambda: torch.lerp(x, y, 0.1, out=out),
        "addcmul (x + y * y)": lambda: torch.addcmul(x, y, y, value=1e-3, out=out),
        "addcdiv (y + x / y)": lambda: torch.addcdiv(y, x, y, value=-1e-3, out=out),
    }


def measure(numel: int, rounds: int) -> list[dict[str, object]]:
    torch.set_num_threads(1)
    y = torch.empty(numel).uniform_(0.5, 1.0, generator=torch.Generator().manual_seed(1))
    out = torch.empty(numel)
    inputs = {name: torch.empty(numel) for name in FILLS}
    for name, fill in FILLS.items():
        fill(inputs[name])
    calls = {fill: _ops(x, y, out) for fill, x in inputs.items()}
    names = list(calls["uniform"])
    times: dict[tuple[str, str], list[float]] = {(op, fill): [] for op in names for fill in FILLS}
    for op in names:                      # one untimed call each: first-touch and code paths warm
        for fill in FILLS:
            calls[fill][op]()
    for _ in range(rounds):
        for op in names:
            for fill in FILLS:
                start = time.perf_counter()
                calls[fill][op]()
                times[(op, fill)].append((time.perf_counter() - start) * 1e3)
    rows = []
    for op in names:
        row: dict[str, object] = {"op": op}
        base = statistics.median(times[(op, "uniform")])
        for fill in FILLS:
            values = times[(op, fill)]
            median = statistics.median(values)
            p10, p90 = np.percentile(values, [10, 90])
            row[fill] = (median, (p90 - p10) / median, median / base)
        rows.append(row)
    return rows


def table(rows: list[dict[str, object]]) -> str:
    head = "| op | " + " | ".join(f"{f} ms (spread, x uniform)" for f in FILLS) + " |"
    lines = [head, "|" + "---|" * (len(FILLS) + 1)]
    for row in rows:
        cells = [f"{m:.2f} ({s:.0%}, {r:.2f}x)" for m, s, r in (row[f] for f in FILLS)]  # type: ignore[misc]
        lines.append(f"| {row['op']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--numel", type=int, default=4 * 2 ** 20, help="Elements per input (float32).")
    parser.add_argument("--rounds", type=int, default=15, help="Interleaved timed rounds (median reported).")
    parser.add_argument("--output", type=Path, default=None, help="Markdown file to write "
                        "(default benchmarks/results/value_sensitivity_<platform>.md).")
    args = parser.parse_args()
    name = platforms.default_name(platforms.detect())
    load = os.getloadavg()
    started = datetime.now().astimezone()
    rows = measure(args.numel, args.rounds)
    text = (f"# Value sensitivity of element-wise ops ({name})\n\n"
            f"{started:%Y-%m-%d %H:%M %Z}, torch {torch.__version__}, 1 thread, {args.numel:,} float32 elements, "
            f"{args.rounds} interleaved rounds, load average before {load[0]:.2f} / after "
            f"{os.getloadavg()[0]:.2f}. Each cell: median ms (spread (p90 - p10) / median, ratio to uniform).\n\n"
            f"{table(rows)}\n")
    output = args.output or RESULTS / f"value_sensitivity_{name}.md"
    output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
