"""Record a training loop of one's own outside pmdb, as README's "Bringing your own trace" does, on CUDA (or CPU):
a Kineto trace and an execution trace of three iterations marked ``ProfilerStep#n``, and the time of one step without
the profiler (ms), printed as ``--measured-ms X`` for `pmdb collect trace`.

    python benchmarks/gpu_own_trace.py --device cuda --out DIR   # writes DIR/kineto.json, DIR/et.json
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function


def record(device: str, out: Path, steps: int = 20) -> float:
    """Record the loop into ``out``; returns the unprofiled ms per step."""
    dev = torch.device(device)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(16 * 16 * 16, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    x, y = torch.randn(8, 3, 16, 16, device=dev), torch.randint(0, 10, (8,), device=dev)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    for _ in range(5):  # warm-up
        step()
    sync()
    start = time.perf_counter()
    for _ in range(steps):  # steps without the profiler
        step()
    sync()
    measured_ms = (time.perf_counter() - start) / steps * 1e3
    out.mkdir(parents=True, exist_ok=True)
    et = ExecutionTraceObserver().register_callback(str(out / "et.json"))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True, execution_trace_observer=et) as prof:
        prof.add_metadata("intra_op_threads", str(torch.get_num_threads()))
        for n in range(1, 4):  # three iterations, marked as pmdb reads them
            with record_function(f"ProfilerStep#{n}"):
                step()
            sync()
    prof.export_chrome_trace(str(out / "kineto.json"))
    return measured_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--out", type=Path, required=True, help="directory for kineto.json and et.json")
    args = parser.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device is visible", file=sys.stderr)
        return 2
    print(f"--measured-ms {record(args.device, args.out):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
