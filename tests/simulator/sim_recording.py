"""Record a real 2-rank CPU training step for the simulator tests (spawned ranks import this module by name; the
conftest puts this folder on sys.path): a bottom MLP under DDP (gloo all_reduce), an EmbeddingBag whose pooled rows
go through a synchronous all_to_all_single inside a custom autograd Function, a top layer, BCE and SGD. A
Kineto-only pass and an ET-only pass of the same steps, marked ``ProfilerStep#n`` like the workload collector."""
from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from collectors.workloads.profile import et_pass, kineto_pass

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


def _trainer(rank: int):
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


def rank_main(rank: int, world: int, port: int, directory: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        step = _trainer(rank)
        out = Path(directory)
        kineto_pass(step, [0, 1], KINETO_STEPS, out / f"kineto_{rank}.json", barrier=dist.barrier)
        et_pass(step, [0], ET_STEPS, out / f"et_{rank}.json", barrier=dist.barrier)
        dist.barrier()
    finally:
        dist.destroy_process_group()
