"""A per-rank function for the launcher tests (imported by name in the spawned ranks: the test puts this folder
on sys.path, which spawned processes inherit). It does a real collective before it fails."""
import torch
import torch.distributed as dist


def raise_on_rank_one(ctx, report, payload):
    """One all_reduce on every rank, then rank 1 raises."""
    value = torch.ones(4)
    dist.all_reduce(value)
    if report is not None:
        report(0, value.numpy()[None, :])
    if ctx.rank == 1:
        raise ValueError(f"boom from rank {ctx.rank} after all_reduce gave {value[0].item():g}")
    dist.barrier()  # rank 0 waits here for a rank that never comes

