"""Where an op's operands sit, and what it costs on this host: the caches' effective sizes and three cache states.

Diagnosis for the main job on either host (issue #36, item 2): nothing here is fitted on, and no prediction rule is
chosen by it. Two measurements, both on one thread:

1. **Effective capacities.** A read of a buffer touched just before, for sizes from 0.5 MiB to 1 GiB: GB/s against
   size. The knees are the capacities a training step's operands actually find (on a VM, a shared last-level cache
   may hold far less than lscpu's figure), beside sysfs's sizes (:func:`pmdb.platform.cache_sizes`).
2. **Three states of the demo's op shapes** (DLRM ``dlrm_mixed`` MLPs and interaction, the small transformers):
   ``warm`` (back to back), ``llc`` (operands pushed out of L1/L2 by streaming 4x the L2 through the core, then the
   dispatch path and the op re-warmed on a twin's operands, as the sweep's cold state does: the operands are then in
   the last-level cache) and ``cold`` (the sweep's cold state: the operands' lines flushed from every level by
   :class:`collectors.ops.timer.CacheFlusher`, then the same re-warm). Repetitions of the three alternate, so a busy
   neighbour slows them alike; medians of ``--reps``. ``(llc - warm) / (cold - warm)`` says how much of the cold
   penalty an LLC hit already pays: near 1, cold and in-LLC cost the same on this host.
3. **The op at a reuse distance.** Each of a few bert-sized shapes (:data:`AT_DISTANCE`) cycled through as many
   operand sets as fill ``W`` bytes (``W`` in :data:`WORKING_SETS`): each call's operands were last used ``W``
   bytes of other operands ago, with nothing flushed. That is what pmdb's reuse pricing models: an operand's reuse
   distance plus its size (:mod:`pmdb.traces.reuse`). The share of the cold penalty paid, ``(t(W) - warm) /
   (cold - warm)``, is set beside the share pmdb gives that footprint (``simulator.cache_levels.cold_share``,
   with this host's sysfs L2 and LLC and the LLC found by a memory probe taken here). Passes after the first are
   timed, medians.
4. **A backward call's own cost.** Every backward microbenchmark times one ``torch.autograd.grad`` call; a training
   step pays the engine's per-call cost once per backward, not per node. Per size: one relu's isolated
   ``autograd.grad``, the per-node cost inside a 50-relu chain's backward, and the direct ``threshold_backward``;
   the isolated call minus the in-chain node is what a backward op's microbenchmark carries that a step's node does
   not.

    .venv/bin/python benchmarks/cache_states.py [--reps 40] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import host_line  # noqa: E402
from pmdb.platform import cache_sizes  # noqa: E402
from collectors.ops.engine_call import measure_engine_call_us, median_us  # noqa: E402
from collectors.ops.timer import CacheFlusher  # noqa: E402

SIZES_MIB = (0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
Op = Callable[[], Any]


def read_rate(mib: float, budget_mib: float = 2048) -> float:
    """GB/s of a sum over a float64 buffer of ``mib`` MiB read just after it was read (median of repeats)."""
    buf = np.ones(int(mib * 2 ** 20 / 8))
    buf.sum()
    times = []
    for _ in range(int(min(50, max(3, budget_mib / mib)))):
        start = time.perf_counter()
        buf.sum()
        times.append(time.perf_counter() - start)
    return mib * 2 ** 20 / float(np.median(times)) / 1e9


def _relu_bw(*shape: int) -> Callable[[], tuple[Op, tuple]]:
    def make():
        y, g = torch.randn(*shape).relu(), torch.randn(*shape)
        return (lambda: torch.ops.aten.threshold_backward(g, y, 0.0)), (y, g)
    return make


def _addmm(m: int, k: int, n: int) -> Callable[[], tuple[Op, tuple]]:
    def make():
        b, x, w = torch.randn(n), torch.randn(m, k), torch.randn(n, k)
        return (lambda: torch.addmm(b, x, w.t())), (b, x, w)
    return make


def _wgrad(m: int, k: int, n: int) -> Callable[[], tuple[Op, tuple]]:
    def make():
        g, x = torch.randn(m, n), torch.randn(m, k)
        return (lambda: g.t().mm(x)), (g, x)
    return make


def _bmm(b: int, n: int, d: int, e: int | None = None) -> Callable[[], tuple[Op, tuple]]:
    def make():
        x, y = torch.randn(b, n, d), torch.randn(b, d, e or n)
        return (lambda: torch.bmm(x, y)), (x, y)
    return make


def _add(*shape: int) -> Callable[[], tuple[Op, tuple]]:
    def make():
        a, b = torch.randn(*shape), torch.randn(*shape)
        return (lambda: a + b), (a, b)
    return make


def _layer_norm(*shape: int) -> Callable[[], tuple[Op, tuple]]:
    def make():
        x, w, b = torch.randn(*shape), torch.ones(shape[-1]), torch.zeros(shape[-1])
        return (lambda: torch.nn.functional.layer_norm(x, (shape[-1],), w, b)), (x, w, b)
    return make


SHAPES = {  # the demo's shapes: dlrm_mixed (batch 256, bottom 512-64, top 85-1024-1, 7 vectors of 64) and the
    # small transformers (batch 8, seq 64, hidden 64, 4 heads)
    "dlrm relu backward 256x1024": _relu_bw(256, 1024),
    "dlrm relu backward 256x64": _relu_bw(256, 64),
    "dlrm addmm 256x512 -> 64": _addmm(256, 512, 64),
    "dlrm addmm 256x85 -> 1024": _addmm(256, 85, 1024),
    "dlrm addmm 256x1024 -> 1": _addmm(256, 1024, 1),
    "dlrm weight grad 85x1024 (m 256)": _wgrad(256, 85, 1024),
    "dlrm weight grad 512x64 (m 256)": _wgrad(256, 512, 64),
    "dlrm interaction bmm 256x7x64": _bmm(256, 7, 64),
    "transformer add 8x64x64": _add(8, 64, 64),
    "transformer addmm 512x64 -> 64": _addmm(512, 64, 64),
    "transformer addmm 512x64 -> 256": _addmm(512, 64, 256),
    "transformer layer_norm 8x64x64": _layer_norm(8, 64, 64),
    "transformer attention bmm 32x64x16": _bmm(32, 64, 16),
}


def three_states(make: Callable[[], tuple[Op, tuple]], flusher: CacheFlusher, stream: np.ndarray,
                 reps: int) -> dict[str, float]:
    """Median µs of the op warm, in the LLC and cold, repetitions alternated."""
    fn, roots = make()
    twin, _ = make()
    flusher.target(fn, *roots)
    for _ in range(5):
        fn()
    samples: dict[str, list[float]] = {"warm": [], "llc": [], "cold": []}
    for _ in range(reps):
        for state in ("cold", "warm", "llc"):
            if state == "cold":
                flusher.flush()
                twin()
            elif state == "llc":
                np.add(stream, 1.0, out=stream)   # L1 and L2 refilled with the stream: the operands are in the LLC
                flusher.rewarm()
                twin()
            start = time.perf_counter_ns()
            out = fn()
            samples[state].append((time.perf_counter_ns() - start) / 1e3)
            del out
    return {state: float(np.median(v)) for state, v in samples.items()}


AT_DISTANCE = {"linear 1024x128 -> 128": _addmm(1024, 128, 128), "linear 1024x512 -> 128": _addmm(1024, 512, 128),
               "add 1024x128": _add(1024, 128), "layer_norm 1024x128": _layer_norm(1024, 128)}
WORKING_SETS = tuple(m * 2 ** 20 for m in (1, 2, 4, 8, 16, 32, 64))


def at_distance(make: Callable[[], tuple[Op, tuple]], flusher: CacheFlusher, stream: np.ndarray, reps: int,
                working_sets: tuple[int, ...] = WORKING_SETS) -> tuple[dict[str, float], int, dict[int, float]]:
    """(median µs warm and cold as :func:`three_states` takes them, the op's bytes (operands and output), {working
    set bytes: median µs of a call whose operands were last used that many bytes ago})."""
    t = three_states(make, flusher, stream, reps)
    fn, roots = make()
    out = fn()
    size = sum(x.numel() * x.element_size() for x in (*roots, out))
    del out
    cycled: dict[int, float] = {}
    for ws in working_sets:
        sets = [make()[0] for _ in range(max(2, -(-ws // size)))]
        times = []
        for p in range(1 + max(2, -(-8 * reps // len(sets)))):   # the first pass only brings the sets in
            for call in sets:
                start = time.perf_counter_ns()
                call()
                if p:
                    times.append((time.perf_counter_ns() - start) / 1e3)
        cycled[ws] = float(np.median(times))
        del sets
    return {"warm": t["warm"], "cold": t["cold"]}, size, cycled


def backward_call_cost(elements: int, reps: int, chain: int = 50) -> dict[str, float]:
    """µs: one relu's isolated ``autograd.grad`` ('single'), the per-node cost in a ``chain``-relu backward
    ('in_chain'), the direct ``threshold_backward`` ('direct'), and single - in_chain ('call'), as the ops sweep
    measures it (:func:`collectors.ops.engine_call.measure_engine_call_us`)."""
    figures = measure_engine_call_us(reps, elements, chain, warmup=min(20, reps))
    g, y = torch.randn(elements), torch.randn(elements).relu()
    direct = median_us(lambda: torch.ops.aten.threshold_backward(g, y, 0.0), reps, min(20, reps))
    return {"single": figures["single"], "in_chain": figures["per_node"], "direct": direct, "call": figures["call"]}


def distance_lines(flusher: CacheFlusher, stream: np.ndarray, reps: int, l2: int, llc: int | None) -> list[str]:
    """The section of :func:`at_distance` over :data:`AT_DISTANCE`: per shape and working set, the share of the
    cold penalty measured and the share pmdb's reuse pricing gives."""
    from collectors.memory_probe import read_probe
    from simulator.cache_levels import cold_share
    from simulator.llc_found import from_summaries

    found = from_summaries([{"memory_probe": [read_probe(curve=True)]}], "ops")
    found = found.with_llc(llc) if found is not None else None
    heads = " | ".join(f"{ws // 2 ** 20} MiB" for ws in WORKING_SETS)
    lines = ["", f"## The op at a reuse distance (working sets cycled; share of the cold penalty measured / pmdb's; "
                 f"warm and cold median µs of {reps})", "",
             "LLC found by a memory probe here: " + (found.label() if found else "none (no flush helper, or the "
                                                     "probe told no LLC pace from memory's): pmdb's share is then LRU "
                                                     "over the sysfs LLC")
             + f"; sysfs L2 {l2 / 2 ** 20:g} MiB, LLC {(llc or 0) / 2 ** 20:g} MiB.", "",
             f"| op | MiB | warm | cold | {heads} |", "|---|---|---|---|" + "---|" * len(WORKING_SETS)]
    for name, make in AT_DISTANCE.items():
        t, size, cycled = at_distance(make, flusher, stream, reps)
        gap = t["cold"] - t["warm"]
        cells = []
        for ws, us in cycled.items():
            measured = (us - t["warm"]) / gap if gap > 1e-9 else float("nan")
            modelled = cold_share([(max(ws - size, 0.0), float(size))], float(l2), float(llc or 0), found)
            cells.append(f"{measured:.2f} / {modelled:.2f}")
        lines.append(f"| {name} | {size / 2 ** 20:.2f} | {t['warm']:.0f} | {t['cold']:.0f} | " + " | ".join(cells)
                     + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=40, help="repetitions of each state per shape (default 40)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file (default: print only)")
    args = parser.parse_args(argv)
    if args.reps < 3:
        print("cache_states: --reps must be at least 3", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    from collectors.workloads.allocator import apply_in_process

    apply_in_process()   # pmdb's allocator settings, as `collect ops` times with them
    load_before = os.getloadavg()[0]
    sysfs = cache_sizes()
    l2 = sysfs.get("l2_bytes") or 2 ** 21
    lines = [f"# Cache states on this host — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; sysfs: L2 {l2 / 2 ** 20:g} MiB per core, LLC "
             f"{(sysfs.get('llc_bytes') or 0) / 2 ** 20:g} MiB; one thread, pmdb's allocator settings (since "
             f"2026-11-30); load average {load_before:.2f} at start. "
             f"`benchmarks/cache_states.py` (diagnosis only: nothing is fitted on it).", "",
             "## Read rate of a buffer just read (effective capacities)", "", "| MiB | GB/s |", "|---|---|"]
    for mib in SIZES_MIB:
        lines.append(f"| {mib:g} | {read_rate(mib):.1f} |")
    flusher = CacheFlusher()
    stream = np.ones(4 * l2 // 4, dtype=np.float32)
    lines += ["", f"## The demo's op shapes in three states (median µs of {args.reps}; `llc`: a {4 * l2 / 2 ** 20:g} "
              f"MiB stream, then the re-warm; `cold`: {flusher.evictor.method if flusher.evictor else 'a stream'} of the "
              "operands, then the "
              "re-warm)", "", "| op | warm | llc | cold | (llc - warm) / (cold - warm) |", "|---|---|---|---|---|"]
    for name, make in SHAPES.items():
        t = three_states(make, flusher, stream, args.reps)
        share = (t["llc"] - t["warm"]) / (t["cold"] - t["warm"]) if t["cold"] - t["warm"] > 1e-9 else float("nan")
        lines.append(f"| {name} | {t['warm']:.1f} | {t['llc']:.1f} | {t['cold']:.1f} | {share:.2f} |")
    lines += distance_lines(flusher, stream, args.reps, l2, sysfs.get("llc_bytes"))
    lines += ["", f"## A backward call's own cost (median µs of {args.reps * 5}; chain of 50 relus)", "",
              "| elements | isolated autograd.grad | per node in a chain | direct kernel | the call's own cost |",
              "|---|---|---|---|---|"]
    for elements in (4, 16_384, 262_144):
        c = backward_call_cost(elements, args.reps * 5)
        lines.append(f"| {elements} | {c['single']:.1f} | {c['in_chain']:.1f} | {c['direct']:.1f} | {c['call']:.1f} |")
    lines += ["", f"Load average {os.getloadavg()[0]:.2f} at the end."]
    report = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
