"""How a fresh process's steps settle: each step's time against the same process's steady state, by step index.

pmdb prices a step from operators timed in processes that have run them many times, so it predicts a process's
steady-state step. A ground truth taken in a fresh process right after a short warm-up may sit in a transient
instead. This collects the quickstart's single-rank workloads (`pmdb.cli.quickstart`, their own arguments) with no
warm-up, ``--iters`` timed steps and no traces, in ``--repeats`` fresh launches each (pmdb's own ground-truth path:
fork server, allocator settings, one timed loop), and prints per workload and range of step indices the median over
launches of (the range's median step) / (the same launch's median of steps ``--iters``/2 … ``--iters``), and the
share of exact zeros left in the largest optimizer second moment after the last step (Adam's state of the token
embedding: its rows stay zero until a batch holds their token, and ``torch.sqrt`` of zeros takes several times its
time on other values here, ``value_sensitivity_cpu-amd-epyc-2c.md``; pmdb prices that square root at the share
recorded at the start and the end of the timed steps, ``pmdb.traces.state_values``). Step index 0 is the process's
first step. Nothing is fitted or predicted.

``--phases`` then rebuilds each transformer run's trainer in this process (its stored config, seed 0, one thread,
pmdb's allocator settings, a fresh batch every step as in `collect workload`) and times its phases apart
(zero_grad with the forward and loss, backward, optimizer step) over the same step ranges, with the largest second
moment's zero share at the start of each range: which phase the transient lives in.

    .venv/bin/python benchmarks/fresh_process_warmup.py [--repeats 4] [--iters 400] [--phases] [--out F.md]
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

from pmdb_commands import Commands, emit, host_line  # noqa: E402
from host_op_diagnosis import phase_marks  # noqa: E402
from truth_repeat import stored_collections, workloads  # noqa: E402

COMMANDS = Commands("fresh_process_warmup")
EDGES = (5, 25, 50, 100, 200)   # step-index ranges [5, 25), [25, 50), ... then [200, iters / 2) when iters > 400
DEFAULT_WORKLOADS = ("dlrm-ws1", "gpt2-ws1", "bert-ws1", "xlnet-ws1")
# per workload run: the zero share of its largest second moment (Adam's exp_avg_sq of the token embedding) after the
# first launch's last step (collectors.workloads.optimizer_state; none for an optimizer without one)
STORED_CONFIGS = ("SELECT w.name || ' ws' || w.world_size AS workload, w.family, CAST(w.config AS VARCHAR) AS config, "
                  "w.batch_size FROM workloads w WHERE w.world_size = 1 AND w.family = 'transformer'")
LARGEST_STATE_ZEROS = ("SELECT w.name || ' ws' || w.world_size AS workload, arg_max(s.zero_frac, s.numel) AS zeros "
                       "FROM optimizer_state_stats s JOIN workloads w USING (workload_id) "
                       "WHERE s.state = 'exp_avg_sq' GROUP BY ALL")


def with_counts(args: tuple[str, ...], iters: int, repeats: int) -> tuple[str, ...]:
    """The workload's arguments with no warm-up, ``iters`` timed steps, ``repeats`` launches and no traces."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg in ("--iters", "--warmup", "--repeats", "--trace-iters"):
            skip = True
            continue
        out.append(arg)
    return (*out, "--iters", str(iters), "--warmup", "0", "--repeats", str(repeats), "--no-trace")


def ranges(iters: int) -> list[tuple[int, int]]:
    """The step-index ranges reported (each against the steady range [iters // 2, iters))."""
    edges = [e for e in EDGES if e < iters // 2] + [iters // 2]
    return list(zip(edges, edges[1:]))


def settling(times_us: list[float], iters: int) -> list[float]:
    """Per range of :func:`ranges`: median step of the range / median step of [iters // 2, iters) (one launch)."""
    steady = statistics.median(times_us[iters // 2:iters])
    return [statistics.median(times_us[a:b]) / steady for a, b in ranges(iters)]


def launches(times_us: list[float], iters: int) -> list[list[float]]:
    """A run's stored iterations (launch k's step i at k * iters + i) split per launch."""
    return [times_us[k:k + iters] for k in range(0, len(times_us) - iters + 1, iters)]


def table(by_workload: dict[str, list[list[float]]], iters: int, zeros: dict[str, float]) -> list[str]:
    """Markdown rows: per workload the median over launches of each range's ratio, the launches' steady ms and the
    zero share of its largest second moment after step ``iters`` (``zeros``, by workload; '-' without one)."""
    heads = [f"steps {a}-{b - 1}" for a, b in ranges(iters)]
    lines = ["| workload | launches | " + " | ".join(heads) + f" | steady ms (steps {iters // 2}-{iters - 1}) | "
             f"zeros after step {iters} |", "|---|---|" + "---|" * len(heads) + "---|---|"]
    for name, runs in by_workload.items():
        ratios = [settling(times, iters) for times in runs]
        cells = []
        for column in zip(*ratios):
            cells.append(f"{statistics.median(column):.3f} ({min(column):.2f}-{max(column):.2f})")
        steady = " / ".join(f"{statistics.median(t[iters // 2:iters]) / 1e3:.2f}" for t in runs)
        zero = f"{zeros[name]:.3f}" if name in zeros else "-"
        lines.append(f"| {name} | {len(runs)} | " + " | ".join(cells) + f" | {steady} | {zero} |")
    return lines


def largest_state_zeros(optimizer) -> float | None:
    """The zero share of the optimizer's largest second moment now (None before its first step)."""
    from collectors.workloads.optimizer_state import state_zero_fractions

    rows = [r for r in state_zero_fractions(optimizer, 0) if r["state"] == "exp_avg_sq"]
    return max(rows, key=lambda r: r["numel"])["zero_frac"] if rows else None


def phase_times(family: str, config: dict, batch_size: int, iters: int) -> tuple[dict[str, list[float]], list]:
    """Per phase ('forward', 'backward', 'optimizer') the µs of each of ``iters`` steps of a new trainer, a fresh
    batch each step; and the largest second moment's zero share before each step."""
    import torch

    from collectors.workloads.allocator import apply_in_process
    from collectors.workloads.trainers import make_trainer, stored_config

    apply_in_process()
    torch.set_num_threads(1)
    trainer = make_trainer(family, stored_config(family, config, batch_size), torch.device("cpu"))
    trainer.prepare(list(range(iters)))
    times: dict[str, list[float]] = {"forward": [], "backward": [], "optimizer": []}
    zeros: list = []
    for k in range(iters):
        zeros.append(largest_state_zeros(trainer.optimizer))
        marks = phase_marks(trainer, family, trainer.batches[k])
        del marks[1]   # zero_grad counts with the forward
        for phase, begun, ended in zip(times, marks, marks[1:]):
            times[phase].append((ended - begun) / 1e3)
    return times, zeros


def phase_table(home: Path, iters: int, log: list[str]) -> list[str]:
    """Markdown rows: per transformer run and phase the median ms of each step range (and of the steady range),
    then the zero share at each range's start."""
    import json

    heads = [f"steps {a}-{b - 1}" for a, b in ranges(iters)] + [f"steps {iters // 2}-{iters - 1}"]
    lines = ["| workload | phase | " + " | ".join(heads) + " |", "|---|---|" + "---|" * len(heads)]
    spans = ranges(iters) + [(iters // 2, iters)]
    for row in COMMANDS.sql(home, STORED_CONFIGS, log):
        times, zeros = phase_times(row["family"], json.loads(row["config"]), int(row["batch_size"]), iters)
        for phase, values in times.items():
            cells = [f"{statistics.median(values[a:b]) / 1e3:.2f}" for a, b in spans]
            lines.append(f"| {row['workload']} | {phase} ms | " + " | ".join(cells) + " |")
        shown = [f"{zeros[a]:.2f}" if zeros[a] is not None else "-" for a, _ in spans]
        lines.append(f"| {row['workload']} | zero share at the start | " + " | ".join(shown) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4, help="fresh launches of each workload (default 4)")
    parser.add_argument("--iters", type=int, default=400, help="timed steps per launch, no warm-up (default 400)")
    parser.add_argument("--workload", action="append", default=None,
                        help=f"a quickstart workload step (repeatable; default {', '.join(DEFAULT_WORKLOADS)})")
    parser.add_argument("--phases", action="store_true",
                        help="also time each transformer's phases apart in this process (see the docstring)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file to append to")
    args = parser.parse_args(argv)
    known = workloads()
    chosen = args.workload or list(DEFAULT_WORKLOADS)
    unknown = [w for w in chosen if w not in known]
    if unknown or args.repeats < 1 or args.iters < 60:
        why = "unknown workload " + ", ".join(unknown) if unknown else "--repeats below 1 or --iters below 60"
        print(f"fresh_process_warmup: {why} (known: {', '.join(sorted(known))})", file=sys.stderr)
        return 2
    home = Path(tempfile.mkdtemp(prefix="fresh_process_warmup_")) / "ws"
    log: list[str] = []
    started = datetime.now(timezone.utc)
    begun = time.monotonic()
    COMMANDS.run(home, "init", log=log)
    for name in chosen:
        COMMANDS.run(home, *with_counts(known[name], args.iters, args.repeats), log=log)
    by_workload = {name: launches(runs[0][1], args.iters) for name, runs in stored_collections(home, log).items()}
    lines = [f"## A fresh process's steps against its steady state — {started:%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; {args.repeats} fresh launches of each workload, {args.iters} timed steps each, "
             f"no warm-up, no traces, {(time.monotonic() - begun) / 60:.1f} min "
             "(`benchmarks/fresh_process_warmup.py`, the quickstart's arguments otherwise). Cells: the median over "
             "launches of (median step of the range) / (median step of the launch's second half), the launches' "
             "range in brackets.", ""]
    zeros = {row["workload"]: float(row["zeros"]) for row in COMMANDS.sql(home, LARGEST_STATE_ZEROS, log)}
    lines += table(by_workload, args.iters, zeros)
    if args.phases:
        lines += ["", f"Phases timed apart in one process (`--phases`, {args.iters} steps per run, a fresh batch each "
                  "step), median ms per step range, and the zero share of the largest second moment at its start:", ""]
        lines += phase_table(home, args.iters, log)
    emit("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
