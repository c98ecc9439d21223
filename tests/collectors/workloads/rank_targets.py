"""Rank programs for the runner tests (imported by name in the rank processes, so they live in their own module)."""
from __future__ import annotations

import os


def all_reduce_rank(rank: int, world_size: int, payload: int) -> dict:
    """A real gloo all_reduce of (rank + payload); returns what this rank saw."""
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    value = torch.tensor([float(rank + payload)])
    dist.all_reduce(value)
    dist.destroy_process_group()
    return {"rank": rank, "sum": float(value.item()), "pid": os.getpid(), "env_rank": os.environ["RANK"]}


def fail_on_rank_one(rank: int, world_size: int, payload: str) -> None:
    """Rank 1 raises; the others wait in a barrier that never completes."""
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    if rank == 1:
        raise ValueError(payload)
    dist.barrier()


def die_on_rank_one(rank: int, world_size: int, payload: int) -> None:
    """Rank 1 exits abruptly with code ``payload`` after printing a line to its log."""
    import time

    if rank == 1:
        print("about to die", flush=True)
        os._exit(payload)
    time.sleep(60)


def exchange_check(rank: int, world_size: int, payload: tuple) -> dict:
    """The DLRM pooled-embedding exchange (forward and backward) with known values: returns the largest errors."""
    import torch
    import torch.distributed as dist

    from collectors.workloads.dlrm import PooledAllToAll, block_order, to_table_order
    from collectors.workloads.sharders import rank_layout

    plan, dim, batch = payload
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    layout = rank_layout(plan, [dim] * len(plan), world_size, batch)
    own = layout.tables[rank]
    sample = torch.arange(batch, dtype=torch.float64).view(-1, 1)
    col = torch.arange(dim, dtype=torch.float64).view(1, -1)

    def value(t, s):  # the pooled value of table t, sample s (column c adds c / 1000)
        return t * 1000 + s + col / 1000

    pooled = (torch.cat([value(t, sample) for t in own], dim=1) if own
              else torch.zeros(batch, 0, dtype=torch.float64)).requires_grad_(True)
    out = to_table_order(PooledAllToAll.apply(pooled, layout, rank), block_order(layout), dim)
    mine = sample[rank * layout.local_batch:(rank + 1) * layout.local_batch]
    expected = torch.cat([value(t, mine) for t in range(len(plan))], dim=1)
    grad = -2 * expected  # a gradient that names its table and sample
    out.backward(grad)
    back = pooled.grad if own else torch.zeros(batch, 0, dtype=torch.float64)
    expected_back = torch.cat([-2 * value(t, sample) for t in own], dim=1) if own else back
    return {"forward": float((out - expected).abs().max()), "backward": float((back - expected_back).abs().max())
            if own else 0.0, "shape": list(out.shape)}


def environment_rank(rank: int, world_size: int, payload: str) -> dict:
    """The variable ``payload`` of a rank's environment, and the process that started the rank."""
    return {"value": os.environ.get(payload), "parent": os.getppid()}
