"""Record real traces for the trace tests: a tiny CPU training loop profiled in a Kineto-only pass, an ET-only
pass and a joint pass, and a 2-rank gloo program (spawned ranks import this module by name: the tests put this
folder on sys.path). Iterations are marked ``ProfilerStep#n`` in every pass, as the workload collector does."""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

STEPS = 3


def _mlp_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def step() -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return step


def _marked(step, steps: int = STEPS) -> None:
    for n in range(1, steps + 1):
        with record_function(f"ProfilerStep#{n}"):
            step()


def kineto_pass(step, path: Path, et_path: Path | None = None) -> None:
    observer = ExecutionTraceObserver().register_callback(str(et_path)) if et_path else None
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=observer) as prof:
        _marked(step)
    prof.export_chrome_trace(str(path))


def et_pass(step, path: Path) -> None:
    observer = ExecutionTraceObserver()
    observer.register_callback(str(path))
    observer.start()
    try:
        _marked(step)
    finally:
        observer.stop()
        observer.unregister_callback()


def record_cpu_passes(directory: Path) -> dict[str, Path]:
    """Kineto-only, ET-only and joint passes of the same training step (after 2 warm-up steps)."""
    torch.set_num_threads(1)
    step = _mlp_step()
    for _ in range(2):
        step()
    paths = {name: directory / f"{name}.json" for name in ("kineto", "et", "joint_kineto", "joint_et")}
    kineto_pass(step, paths["kineto"])
    et_pass(step, paths["et"])
    kineto_pass(step, paths["joint_kineto"], et_path=paths["joint_et"])
    return paths


def _gloo_step(rank: int):
    x = torch.arange(64, dtype=torch.float32) + rank

    def step() -> None:
        y = x * 2
        dist.all_reduce(y)
        z = y + 1
        out = torch.empty(64)
        dist.all_to_all_single(out, z)
        out.view(8, 8).sum()
    return step


def gloo_rank(rank: int, world: int, port: int, directory: str) -> None:
    """One rank: init gloo, warm up, then a Kineto-only pass and an ET-only pass of the same step."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        step = _gloo_step(rank)
        step()
        out = Path(directory)
        kineto_pass(step, out / f"kineto_{rank}.json")
        et_pass(step, out / f"et_{rank}.json")
        dist.barrier()
    finally:
        dist.destroy_process_group()
