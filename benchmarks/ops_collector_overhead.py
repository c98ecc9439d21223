"""How much the op collector adds to what it measures, against a bare timing loop.

For a few configs (about 100 µs to 10 ms) the same op is timed two ways, in interleaved rounds so machine drift
hits both alike: a bare loop (``perf_counter_ns`` around a direct torch call) and the collector's warm timer around
the registry's built callable. The report gives each one's median, the collector's overhead in percent (target:
< 5% for ops >= 100 µs) and the sweep's wall time per config against the time inside timed repetitions.

Run: .venv/bin/python benchmarks/ops_collector_overhead.py [--rounds 7] [--threads 1]
"""
from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

from collectors.ops import catalogue
from collectors.ops.catalogue import BuildContext
from collectors.ops.sweep import Sweep, SweepOptions
from collectors.ops.timer import TimerSettings, time_cpu
from pmdb import platform as platforms
from pmdb.config import Workspace
from pmdb.store import Store

CONFIGS = [
    ("fully_connected", {"M": 64, "N": 512, "K": 512}),
    ("fully_connected", {"M": 512, "N": 1024, "K": 1024}),
    ("layer_norm", {"B": 8, "M": 128, "N": 512}),
    ("relu", {"M": 4096, "N": 1024}),
    ("bmm", {"B": 64, "M": 128, "N": 128, "K": 128}),
]


def bare_call(op: str, c: dict, ctx: BuildContext):
    """The op called directly, on tensors like the builder's."""
    if op == "fully_connected":
        x, w, b = ctx.rand(c["M"], c["K"], requires_grad=True), ctx.rand(c["N"], c["K"], requires_grad=True), \
            ctx.rand(c["N"], requires_grad=True)
        return lambda: F.linear(x, w, b), (x, w, b)
    if op == "layer_norm":
        x = ctx.rand(c["B"], c["M"], c["N"], requires_grad=True)
        w, b = torch.ones(c["N"], requires_grad=True), torch.zeros(c["N"], requires_grad=True)
        return lambda: F.layer_norm(x, (c["N"],), w, b), (x, w, b)
    if op == "relu":
        x = ctx.rand(c["M"], c["N"], requires_grad=True)
        return lambda: F.relu(x), (x,)
    x, y = ctx.rand(c["B"], c["M"], c["K"], requires_grad=True), ctx.rand(c["B"], c["K"], c["N"], requires_grad=True)
    return lambda: x.bmm(y), (x, y)


def bare_loop(fn, reps: int) -> float:
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        out = fn()
        samples.append((time.perf_counter_ns() - start) / 1e3)
        del out
    return float(np.median(samples))


def per_call_overhead(rounds: int) -> None:
    print(f"{'op':16s} {'config':34s} {'bare µs':>10s} {'collector µs':>13s} {'overhead':>9s}")
    ctx = BuildContext(torch.device("cpu"), seed=0)
    for op, given in CONFIGS:
        spec = catalogue.get(op)
        config = spec.check(given)
        built = spec.build(config, ctx)
        bare, _ = bare_call(op, config, ctx)
        probe = bare_loop(bare, 3)
        reps = int(min(200, max(5, 20_000 / max(probe, 1.0))))
        settings = TimerSettings(warmup=1, min_reps=reps, max_reps=reps, min_time_us=0)
        b_meds, c_meds = [], []
        for _ in range(rounds):
            b_meds.append(bare_loop(bare, reps))
            c_meds.append(time_cpu(built.fwd, settings).median_us)
        b, c = float(np.median(b_meds)), float(np.median(c_meds))
        print(f"{op:16s} {str(given):34s} {b:10.1f} {c:13.1f} {100 * (c - b) / b:8.1f}%")


def sweep_efficiency(configs: int) -> None:
    """Wall time of a real sweep (store writes included) against the time inside timed repetitions."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        with Store.open(ws, create=True) as store:
            name = platforms.register_local(store)["name"]
            options = SweepOptions(ops=["fully_connected", "layer_norm"], max_configs=configs, threads=None)
            with store.run("ops", name, {}) as run:
                started = time.monotonic()
                Sweep(store, run, name, options).execute(progress=False)
                wall = time.monotonic() - started
            timed = store.scalar("SELECT sum(mean_us * repetitions) / 1e6 FROM op_measurements WHERE run_id = ?",
                                 [run.run_id])
            rows = store.scalar("SELECT count(*) FROM op_measurements WHERE run_id = ?", [run.run_id])
    print(f"\nsweep of {2 * configs} configs ({rows} rows): wall {wall:.1f} s, inside timed repetitions "
          f"{timed:.1f} s ({100 * timed / wall:.0f}%); the rest is warm-up, cache flushes, building inputs and writes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per config")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--sweep-configs", type=int, default=20, help="configs per op for the sweep figure")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {torch.get_num_threads()}, rounds {args.rounds}")
    per_call_overhead(args.rounds)
    sweep_efficiency(args.sweep_configs)


if __name__ == "__main__":
    main()
