"""An op's time right after a stretch of scalar work: what back-to-back microbenchmarks cannot see.

Diagnosis for the main job (issue #36): nothing is fitted on it and no rule is chosen by it. pmdb prices an op by
repetitions run back to back (warm) or after its operands were flushed (cold); inside a training step an op may
instead follow a long stretch of scalar code (a dropout's random numbers, Python between modules). Three parts,
one thread, pmdb's allocator settings:

1. **Gap**: each op run three times back to back (untimed: the same warm start for every gap), then ``G`` µs of a
   pure-Python spin (no memory traffic, no vector instructions), then one timed call; for several ``G``, the gaps
   interleaved, so that a slow phase of a shared host slows every column alike. Printed: the median µs per gap and
   its ratio to no gap.
2. **Recovery**: after one 2 ms spin, the same op called back to back: µs of the 1st, 2nd, ... call (medians over
   rounds), to see how long the slowdown lasts.
3. **In the step**: the quickstart's bert step (2 layers, hidden 64, 4 heads, batch 8, sequence 64, AdamW),
   alternately in training mode (dropout draws random numbers) and in eval mode (dropout is the identity), the
   feed-forward up-projection (a 512x64 by 64x256 linear, the same shape in both modes) timed by module hooks, and
   the forward, the backward and the optimizer step.
4. **Scalar after vector**: a fixed piece of scalar work (a Python loop of 20 000 additions) timed right after three
   512³ GEMMs, right after a 2 ms spin, and right after 20 in-place adds over 1 MiB (vector, not matrix, work),
   interleaved: a core that lowers its clock for wide vector instructions keeps the lower clock for a while after
   them, and code that runs then is slower.
5. **Which work puts it to sleep**: the part-1 linear (512x64 -> 256) timed right after :data:`KIND_US` µs of
   one kind of work — a pure-Python spin, elementwise adds, copies, dropout, layer_norm, mul/add/tanh, a 256³ GEMM,
   a GEMM then the spin — the kinds interleaved in a seeded random order, each after three untimed calls of the
   linear: which of a step's ops leave the next GEMM slow.

    .venv/bin/python benchmarks/vector_idle.py [--reps 200] [--steps 200] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from collectors.wake_probe import spin, timed_us  # noqa: E402  (busy-wait µs in pure Python; µs of one call)
from pmdb_commands import emit, host_line  # noqa: E402

GAPS_US = (0, 100, 200, 400, 600, 800, 1600)
WARM_CALLS = 3
RECOVERY_CALLS = 8
RECOVERY_GAP_US = 2000
KIND_US = 900      # part 5: µs of each kind of work before the timed linear (gpt2's gelu stretch is ~900 µs)


def ops() -> dict[str, Callable[[], object]]:
    """The ops timed in parts 1 and 2 (operands made once, seeded): shapes of the quickstart's bert step."""
    gen = torch.Generator().manual_seed(0)
    x, h = torch.randn(8, 64, 64, generator=gen), torch.randn(8, 4, 64, 64, generator=gen)
    w256, b256 = torch.randn(256, 64, generator=gen), torch.randn(256, generator=gen)
    w64, b64 = torch.randn(64, 64, generator=gen), torch.randn(64, generator=gen)
    f = torch.nn.functional
    return {"linear 512x64 -> 256": lambda: f.linear(x, w256, b256),
            "linear 512x64 -> 64": lambda: f.linear(x, w64, b64),
            "layer_norm 8x64x64": lambda: f.layer_norm(x, (64,)),
            "softmax 8x4x64x64": lambda: torch.softmax(h, -1),
            "add 8x64x64": lambda: x + x}


def after_gaps(fn: Callable[[], object], gaps_us: tuple[int, ...], reps: int) -> dict[int, float]:
    """Median µs of ``fn`` right after each gap (µs of spin), each timed call preceded by three untimed ones and the
    gap, the gaps interleaved."""
    times: dict[int, list[float]] = {g: [] for g in gaps_us}
    for _ in range(reps):
        for gap in gaps_us:
            for _ in range(WARM_CALLS):
                fn()
            spin(gap)
            times[gap].append(timed_us(fn))
    return {g: statistics.median(v) for g, v in times.items()}


def recovery(fn: Callable[[], object], calls: int, rounds: int, gap_us: float = RECOVERY_GAP_US) -> list[float]:
    """Median µs of the 1st .. ``calls``-th back-to-back call of ``fn`` after a ``gap_us`` spin, over rounds."""
    series: list[list[float]] = [[] for _ in range(calls)]
    for _ in range(rounds):
        spin(gap_us)
        for k in range(calls):
            series[k].append(timed_us(fn))
    return [statistics.median(v) for v in series]


def scalar_work() -> int:
    """A fixed piece of scalar work (part 4)."""
    total = 0
    for i in range(20_000):
        total += i
    return total


def scalar_after(reps: int) -> dict[str, float]:
    """Part 4: median µs of :func:`scalar_work` right after GEMMs, after a spin and after vector adds."""
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 512, generator=gen), torch.randn(512, 512, generator=gen)
    v = torch.randn(256 * 1024, generator=gen)
    before: dict[str, Callable[[], object]] = {
        "three 512³ GEMMs": lambda: [torch.mm(a, b) for _ in range(3)],
        "a 2 ms spin": lambda: spin(2000),
        "20 adds over 1 MiB": lambda: [v.add_(1.0) for _ in range(20)]}
    times: dict[str, list[float]] = {name: [] for name in before}
    for _ in range(reps):
        for name, fn in before.items():
            fn()
            times[name].append(timed_us(scalar_work))
    return {name: statistics.median(v) for name, v in times.items()}


def for_us(fn: Callable[[], object], us: float) -> None:
    """Call ``fn`` until ``us`` µs have passed."""
    end = time.perf_counter_ns() + int(us * 1e3)
    while time.perf_counter_ns() < end:
        fn()


def kinds_before(reps: int, seed: int = 0) -> dict[str, float]:
    """Part 5: median µs of the part-1 linear right after :data:`KIND_US` µs of each kind of work."""
    import random

    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed)
    x, w, b = (torch.randn(512, 64, generator=gen), torch.randn(256, 64, generator=gen),
               torch.randn(256, generator=gen))
    e, e2 = torch.randn(8, 64, 256, generator=gen), torch.randn(8, 64, 256, generator=gen)
    g1, g2 = torch.randn(256, 256, generator=gen), torch.randn(256, 256, generator=gen)
    kinds: dict[str, Callable[[], object]] = {
        "nothing (back to back)": lambda: None,
        "a pure-Python spin": lambda: spin(KIND_US),
        "adds (8x64x256)": lambda: for_us(lambda: e + e2, KIND_US),
        "copies (clone)": lambda: for_us(e.clone, KIND_US),
        "dropout": lambda: for_us(lambda: F.dropout(e, 0.1, True), KIND_US),
        "layer_norm": lambda: for_us(lambda: F.layer_norm(e, (256,)), KIND_US),
        "mul, add, tanh": lambda: for_us(lambda: torch.tanh(e * e2 + 1.0), KIND_US),
        "256³ GEMMs": lambda: for_us(lambda: g1 @ g2, KIND_US),
        "GEMMs (300 µs), then the spin": lambda: (for_us(lambda: g1 @ g2, 300), spin(KIND_US))}
    times: dict[str, list[float]] = {name: [] for name in kinds}
    order = list(kinds)
    rng = random.Random(seed)
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            for _ in range(WARM_CALLS):
                F.linear(x, w, b)
            kinds[name]()
            times[name].append(timed_us(lambda: F.linear(x, w, b)))
    return {name: statistics.median(v) for name, v in times.items()}


def in_step(steps: int) -> dict[str, dict[str, float]]:
    """Part 3: median µs per mode ('train', 'eval') of the forward, backward and optimizer step and of the layers'
    feed-forward up-projection."""
    from collectors.workloads.transformer import TransformerTrainer
    from collectors.workloads.transformer_shape import TransformerConfig

    cfg = TransformerConfig(arch="bert", layers=2, hidden=64, heads=4, seq_len=64, batch_size=8)
    trainer = TransformerTrainer(cfg, 0, 1, 0, torch.device("cpu"))
    ids = list(range(10))
    trainer.prepare(ids)
    for k in ids:
        trainer.step(k)
    model = getattr(trainer.model, "module", trainer.model)
    started: dict[str, int] = {}
    times: dict[tuple[str, str], list[float]] = {}
    for layer in range(cfg.layers):
        name = f"layer {layer} up-projection"
        module = model.get_submodule(f"bert.encoder.layer.{layer}.intermediate.dense")
        module.register_forward_pre_hook(lambda mod, inp, name=name: started.__setitem__(name, time.perf_counter_ns()))
        module.register_forward_hook(lambda mod, inp, out, name=name: times.setdefault(
            ("train" if mod.training else "eval", name), []).append((time.perf_counter_ns() - started[name]) / 1e3))
    for k in range(steps):
        mode = "train" if k % 2 == 0 else "eval"
        trainer.model.train(mode == "train")
        trainer.optimizer.zero_grad()
        start = time.perf_counter_ns()
        loss = trainer.model(**trainer.batches[k % len(ids)]).loss
        forward = time.perf_counter_ns()
        loss.backward()
        backward = time.perf_counter_ns()
        trainer.optimizer.step()
        for name, begun, ended in (("forward", start, forward), ("backward", forward, backward),
                                   ("optimizer step", backward, time.perf_counter_ns())):
            times.setdefault((mode, name), []).append((ended - begun) / 1e3)
    out: dict[str, dict[str, float]] = {}
    for (mode, name), values in times.items():
        out.setdefault(name, {})[mode] = statistics.median(values)
    return out


def report(gaps: dict[str, dict[int, float]], recovered: dict[str, list[float]], step: dict[str, dict[str, float]],
           started: datetime, reps: int, steps: int, scalar: dict[str, float] | None = None,
           kinds: dict[str, float] | None = None) -> str:
    """The Markdown text of the parts."""
    lines = [f"# An op right after scalar work — {started:%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; torch {torch.__version__} (ATen CPU capability "
             f"{torch.backends.cpu.get_cpu_capability()}), one thread (`benchmarks/vector_idle.py`).", "",
             f"## 1. After a gap of scalar work (median µs of {reps} calls per gap, each after {WARM_CALLS} untimed "
             "calls and the gap, the gaps interleaved; ratio to no gap)", "",
             "| op | " + " | ".join(f"{g} µs" for g in GAPS_US) + " |", "|---|" + "---|" * len(GAPS_US)]
    for name, medians in gaps.items():
        base = medians[GAPS_US[0]]
        lines.append(f"| {name} | " + " | ".join(f"{medians[g]:.0f} (x{medians[g] / base:.2f})" for g in GAPS_US)
                     + " |")
    lines += ["", f"## 2. Recovery: calls back to back after a {RECOVERY_GAP_US} µs gap (median µs over rounds)", "",
              "| op | " + " | ".join(f"call {k + 1}" for k in range(RECOVERY_CALLS)) + " |",
              "|---|" + "---|" * RECOVERY_CALLS]
    lines += [f"| {name} | " + " | ".join(f"{v:.0f}" for v in series) + " |" for name, series in recovered.items()]
    lines += ["", f"## 3. In the quickstart's bert step ({steps} steps, training and eval mode alternating; median µs)",
              "", "| what | training mode | eval mode | training / eval |", "|---|---|---|---|"]
    lines += [f"| {name} | {modes['train']:.0f} | {modes['eval']:.0f} | x{modes['train'] / modes['eval']:.2f} |"
              for name, modes in step.items() if "train" in modes and "eval" in modes]
    if scalar:
        base = scalar.get("a 2 ms spin") or next(iter(scalar.values()))
        lines += ["", "## 4. Scalar work right after (median µs; ratio to after the spin)", "",
                  "| right after | µs | ratio |", "|---|---|---|"]
        lines += [f"| {name} | {us:.0f} | x{us / base:.2f} |" for name, us in scalar.items()]
    if kinds:
        base = next(iter(kinds.values()))
        lines += ["", f"## 5. The linear 512x64 -> 256 right after {KIND_US} µs of each kind of work (median µs; "
                  "ratio to back to back)", "", "| right after | µs | ratio |", "|---|---|---|"]
        lines += [f"| {name} | {us:.0f} | x{us / base:.2f} |" for name, us in kinds.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=200, help="calls per op and gap in part 1 (default 200)")
    parser.add_argument("--steps", type=int, default=200, help="training steps in part 3 (default 200)")
    parser.add_argument("--out", type=Path, default=None, help="append the Markdown to this file (default: print)")
    args = parser.parse_args(argv)
    if args.reps < 1 or args.steps < 2:
        print("vector_idle: --reps must be at least 1 and --steps at least 2", file=sys.stderr)
        return 2
    from collectors.workloads.allocator import apply_in_process

    apply_in_process()
    torch.set_num_threads(1)
    started = datetime.now(timezone.utc)
    timed = ops()
    gaps = {name: after_gaps(fn, GAPS_US, args.reps) for name, fn in timed.items()}
    recovered = {name: recovery(fn, RECOVERY_CALLS, max(10, args.reps // 4)) for name, fn in timed.items()}
    text = report(gaps, recovered, in_step(args.steps), started, args.reps, args.steps,
                  scalar_after(max(20, args.reps // 2)), kinds_before(max(20, args.reps // 2)))
    emit(text, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
