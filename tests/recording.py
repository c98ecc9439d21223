"""Real traces for the tests, recorded with the workload collector's own profiled passes
(:mod:`collectors.workloads.profile`: iterations marked ``ProfilerStep#n``). Spawned ranks import this module by name:
the conftests put this folder on sys.path.

* :func:`record_cpu_passes`: a tiny MLP training step in a Kineto-only, an ET-only and a joint (Kineto + ET) pass;
* :func:`gloo_rank`: one rank of a 2-rank gloo program (all_reduce, all_to_all_single);
* :func:`dlrm_like_rank`: one rank of a 2-rank CPU training step — a bottom MLP under DDP (gloo all_reduce), an
  EmbeddingBag whose pooled rows go through a synchronous all_to_all_single inside a custom autograd Function, a top
  layer, BCE and SGD;
* :func:`spawn_ranks`: runs one of those rank functions as real processes.

A rank that finished its passes leaves with ``os._exit(0)``: on this 2-core machine a gloo/DDP helper thread still
alive during interpreter teardown aborts the process now and then ("terminate called without an active exception",
SIGABRT) after every file was written. A recording whose rank still aborts is made again once, from scratch.
"""
from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from torch import nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

from collectors.workloads.profile import STEP_MARKER, et_pass, kineto_pass

STEPS = 3


def _mlp_step() -> Callable[[int], None]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16), torch.randn(8, 1)

    def step(_: int = 0) -> None:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return step


def _joint_pass(step: Callable[[int], None], kineto_path: Path, et_path: Path) -> None:
    """Kineto and ET recorded together (the collector keeps them apart; importers meet such traces)."""
    observer = ExecutionTraceObserver().register_callback(str(et_path))
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=observer) as prof:
        for n in range(1, STEPS + 1):
            with record_function(STEP_MARKER.format(n)):
                step(n)
    prof.export_chrome_trace(str(kineto_path))


def record_cpu_passes(directory: Path) -> dict[str, Path]:
    """Kineto-only, ET-only and joint passes of the same training step (after 2 warm-up steps), 3 marked
    iterations each."""
    torch.set_num_threads(1)
    step = _mlp_step()
    paths = {name: directory / f"{name}.json" for name in ("kineto", "et", "joint_kineto", "joint_et")}
    steps = list(range(1, STEPS + 1))
    kineto_pass(step, [0, 0], steps, paths["kineto"])
    et_pass(step, [], steps, paths["et"])
    _joint_pass(step, paths["joint_kineto"], paths["joint_et"])
    return paths


def _gloo_step(rank: int) -> Callable[[int], None]:
    x = torch.arange(64, dtype=torch.float32) + rank

    def step(_: int = 0) -> None:
        y = x * 2
        dist.all_reduce(y)
        z = y + 1
        out = torch.empty(64)
        dist.all_to_all_single(out, z)
        out.view(8, 8).sum()
    return step


def _join(rank: int, world: int, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def _leave() -> None:
    """End a rank whose work is done without running C++ static destructors (see the module docstring)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_ranks(rank_main: Callable[..., None], world: int, directory: Path) -> None:
    """Run ``rank_main(rank, world, port, directory)`` on ``world`` spawned processes; again once (fresh port, files
    removed) when a rank died of SIGABRT."""
    import torch.multiprocessing as mp
    from torch.multiprocessing.spawn import ProcessExitedException

    for attempt in (1, 2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            mp.spawn(rank_main, args=(world, port, str(directory)), nprocs=world)
            return
        except ProcessExitedException as exc:
            if attempt == 2 or exc.exit_code != -signal.SIGABRT:
                raise
            for leftover in Path(directory).iterdir():
                leftover.unlink()


def gloo_rank(rank: int, world: int, port: int, directory: str) -> None:
    """One rank: init gloo, warm up, then a Kineto-only pass and an ET-only pass of the same step."""
    _join(rank, world, port)
    try:
        step = _gloo_step(rank)
        out = Path(directory)
        steps = list(range(1, STEPS + 1))
        kineto_pass(step, [0], steps, out / f"kineto_{rank}.json")
        et_pass(step, [], steps, out / f"et_{rank}.json")
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _leave()


BATCH, DIM = 64, 8
# profiled steps: seven iterations, so that one iteration slowed by the 2-core machine's scheduler does not move the
# median the replay test compares (the ET covers the same steps: collective sizes come from it)
KINETO_STEPS = ET_STEPS = list(range(2, 9))


class Exchange(torch.autograd.Function):
    """all_to_all_single of the pooled rows forward, of their gradients backward."""

    @staticmethod
    def forward(ctx, pooled: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(pooled)
        dist.all_to_all_single(out, pooled.contiguous())
        return out.view(BATCH, DIM) * 1.0

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(grad)
        dist.all_to_all_single(out, grad.contiguous())
        return out


def _dlrm_like_step(rank: int) -> Callable[[int], None]:
    torch.manual_seed(0)
    bottom = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, DIM)))
    emb = nn.EmbeddingBag(5000, DIM, mode="sum")
    top = nn.Linear(2 * DIM, 1)
    opt = torch.optim.SGD([*bottom.parameters(), *emb.parameters(), *top.parameters()], lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    dense = torch.randn(BATCH, 16, generator=gen)
    indices = torch.randint(0, 5000, (BATCH * 4,), generator=gen)
    offsets = torch.arange(0, BATCH * 4, 4)
    labels = torch.rand(BATCH, 1, generator=gen)

    def step(_: int) -> None:
        opt.zero_grad()
        x = bottom(dense)
        e = Exchange.apply(emb(indices, offsets))
        out = torch.sigmoid(top(torch.cat([x, e], dim=1)))
        nn.functional.binary_cross_entropy(out, labels).backward()
        opt.step()
    return step


def dlrm_like_rank(rank: int, world: int, port: int, directory: str) -> None:
    """One rank of the 2-rank step: a Kineto-only and an ET-only pass, seven marked iterations each."""
    _join(rank, world, port)
    try:
        step = _dlrm_like_step(rank)
        out = Path(directory)
        kineto_pass(step, [0, 1], KINETO_STEPS, out / f"kineto_{rank}.json", barrier=dist.barrier)
        et_pass(step, [0], ET_STEPS, out / f"et_{rank}.json", barrier=dist.barrier)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    _leave()
