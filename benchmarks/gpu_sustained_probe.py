"""Burst against sustained: does a kernel run as fast in a long training-like stream as in the single calls that
kernel tables (NeuSight's) are timed with? (#33: the V100's steps come out faster than the sum of their single-call
kernels, the 70-75 W cards' long kernels slower; neither is visible from a spec sheet.)

For each shape (the GEMMs of BERT-large and GPT-2 large steps, a big square GEMM, a 1M-element add and layer norm),
on one device, times in µs per call:

- ``single_call_us``: NeuSight's method: one call between two events, synchronised, 25 times, the mean of the 5
  fastest (host launch path included for a short kernel);
- ``back_to_back_us``: 50 calls in a row between two events (the method of ``h200_launch_floor.csv``), the best of 3;
- ``sustained_first_us`` / ``sustained_last_us``: the op launched without pause for ``--seconds`` (a stream like a
  training step's), timed in windows of about 100 ms; the first window and the median of the last three.

Throughout, ``nvidia-smi`` (when there is one) samples the SM clock (MHz), the power draw (W) and the throttle
reasons every 100 ms: their medians over the idle pause before a shape (the clock its single calls start from, as a
table's do: the single calls themselves are too short to be sampled) and over the end of its stream go beside the
times. On a CPU (``--device cpu``) the same
phases run with host timers and no clock samples: a dry run of this script, not a measurement of anything.

    python benchmarks/gpu_sustained_probe.py --device cuda --out DIR   # writes DIR/sustained_probe.csv
"""
from __future__ import annotations

import argparse
import csv
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

SINGLE_REPS, SINGLE_KEPT = 25, 5        # NeuSight's collector: 25 calls, the mean of the 5 fastest
B2B_CALLS, B2B_ROUNDS = 50, 3
WINDOW_S = 0.1                          # sustained phase: one timing window (s)
# nvidia-smi fields, the fullest first: newer drivers name the throttle reasons clocks_event_reasons
SMI_FIELDS = ("clocks.sm,power.draw,clocks_throttle_reasons.active", "clocks.sm,power.draw,clocks_event_reasons.active",
              "clocks.sm,power.draw")
# (name, kind, sizes): GEMMs as x[M,K] @ W[N,K]^T (F.linear), element-wise / layer norm over [M, N]
CUDA_SHAPES = (("gpt2_large qkv", "linear", (1024, 1280, 3840)),
               ("gpt2_large mlp up", "linear", (1024, 1280, 5120)),
               ("gpt2_large mlp down", "linear", (1024, 5120, 1280)),
               ("bert_large b8 mlp up", "linear", (4096, 1024, 4096)),
               ("bert_large b2 attn out", "linear", (1024, 1024, 1024)),
               ("square 4096", "linear", (4096, 4096, 4096)),
               ("add 1M", "add", (1024, 1024)), ("layer_norm 1024x1280", "layer_norm", (1024, 1280)))
CPU_SHAPES = (("tiny linear", "linear", (64, 64, 64)), ("tiny add", "add", (256, 256)),
              ("tiny layer_norm", "layer_norm", (64, 128)))
COLUMNS = ("name", "op", "sizes", "single_call_us", "back_to_back_us", "sustained_first_us", "sustained_last_us",
           "sustained_windows", "clock_idle_mhz", "clock_sustained_mhz", "power_idle_w", "power_sustained_w",
           "throttle_sustained")


@dataclass
class Sampler:
    """``nvidia-smi`` sampled every 100 ms in a thread while a phase runs: (time, clock MHz, power W, reasons)."""

    rows: list[tuple[float, float, float, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _proc: subprocess.Popen | None = None

    def start(self) -> "Sampler":
        """Start sampling with the first field list this nvidia-smi answers (none: no samples, NaN medians)."""
        if shutil.which("nvidia-smi") is None:
            return self
        for fields in SMI_FIELDS:
            query = ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", "-i", "0"]
            if subprocess.run(query, capture_output=True, timeout=30).returncode == 0:
                self._proc = subprocess.Popen(query + ["-lms", "100"], stdout=subprocess.PIPE, text=True)
                threading.Thread(target=self._read, daemon=True).start()
                break
        return self

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for line in self._proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) in (2, 3):
                reasons = parts[2] if len(parts) == 3 else ""
                self.rows.append((time.perf_counter(), _number(parts[0]), _number(parts[1]), reasons))

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(timeout=5)

    def between(self, t0: float, t1: float) -> tuple[float, float, str]:
        """Median clock (MHz) and power (W) of the samples in [t0, t1], and the most frequent throttle reasons."""
        rows = [r for r in self.rows if t0 <= r[0] <= t1]
        if not rows:
            return float("nan"), float("nan"), ""
        reasons = statistics.mode(r[3] for r in rows)
        return statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows), reasons


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


class Clock:
    """Per-call µs of ``calls`` calls of ``fn``: CUDA events on a GPU, the host's clock on a CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()

    def per_call_us(self, fn: Callable[[], object], calls: int) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e3 / calls
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) * 1e6 / calls


def build(kind: str, sizes: tuple[int, ...], device: torch.device) -> Callable[[], object]:
    """The op of one shape on ``device``, inputs made once (fp32, seeded)."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    if kind == "linear":
        m, k, n = sizes
        x = torch.randn(m, k, generator=gen).to(device)
        w = torch.randn(n, k, generator=gen).to(device)
        return lambda: torch.nn.functional.linear(x, w)
    m, n = sizes
    a = torch.randn(m, n, generator=gen).to(device)
    if kind == "add":
        b = torch.randn(m, n, generator=gen).to(device)
        return lambda: a + b
    return lambda: torch.nn.functional.layer_norm(a, (n,))


def probe(fn: Callable[[], object], clock: Clock, sampler: Sampler, seconds: float,
          rested_since: float) -> dict[str, object]:
    """The three phases of one shape (µs per call) with the clock samples of the rest before (from
    ``rested_since``, perf_counter s) and of the stream's end."""
    t0 = time.perf_counter()
    single = sorted(clock.per_call_us(fn, 1) for _ in range(SINGLE_REPS))
    b2b = min(clock.per_call_us(fn, B2B_CALLS) for _ in range(B2B_ROUNDS))
    per_call = clock.per_call_us(fn, 1)
    calls = max(1, int(WINDOW_S * 1e6 / max(per_call, 1e-3)))
    windows: list[float] = []
    t2 = time.perf_counter()
    while time.perf_counter() - t2 < seconds or len(windows) < 4:
        windows.append(clock.per_call_us(fn, calls))
    t3 = time.perf_counter()
    clock_idle, power_idle, _ = sampler.between(rested_since, t0)
    clock_sustained, power_sustained, reasons = sampler.between(t3 - min(1.0, (t3 - t2) / 2), t3)
    return {"single_call_us": statistics.fmean(single[:SINGLE_KEPT]), "back_to_back_us": b2b,
            "sustained_first_us": windows[0], "sustained_last_us": statistics.median(windows[-3:]),
            "sustained_windows": len(windows), "clock_idle_mhz": clock_idle,
            "clock_sustained_mhz": clock_sustained, "power_idle_w": power_idle,
            "power_sustained_w": power_sustained, "throttle_sustained": reasons}


def run(device: torch.device, seconds: float, out: Path, idle_s: float = 2.0) -> list[dict[str, object]]:
    """Every shape of the device kind, an idle pause before each (the single calls start from a GPU at rest, as a
    table's do); writes ``out/sustained_probe.csv`` and returns its rows."""
    clock, sampler = Clock(device), Sampler().start()
    rows = []
    try:
        for name, kind, sizes in (CUDA_SHAPES if clock.cuda else CPU_SHAPES):
            fn = build(kind, sizes, device)
            for _ in range(3):   # first calls: cuBLAS handles, allocator
                fn()
            clock.sync()
            rested_since = time.perf_counter()
            time.sleep(idle_s)
            row = {"name": name, "op": kind, "sizes": "x".join(map(str, sizes)),
                   **probe(fn, clock, sampler, seconds, rested_since)}
            rows.append(row)
            print(f"{name:24} single {row['single_call_us']:9.1f}  b2b {row['back_to_back_us']:9.1f}  sustained "
                  f"{row['sustained_first_us']:9.1f} -> {row['sustained_last_us']:9.1f} us  clock "
                  f"{row['clock_idle_mhz']} -> {row['clock_sustained_mhz']} MHz", flush=True)
    finally:
        sampler.stop()
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sustained_probe.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu (a dry run of the script)")
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each sustained stream (s)")
    parser.add_argument("--idle", type=float, default=2.0, help="pause before each shape (s)")
    parser.add_argument("--out", type=Path, required=True, help="directory for sustained_probe.csv")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("gpu_sustained_probe.py: no CUDA device is visible (--device cpu for a dry run)", file=sys.stderr)
        return 2
    if args.seconds <= 0 or args.idle < 0:
        print("gpu_sustained_probe.py: --seconds must be > 0 and --idle >= 0", file=sys.stderr)
        return 2
    run(torch.device(args.device), args.seconds, args.out, args.idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
