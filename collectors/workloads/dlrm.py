"""The DLRM of one rank: bottom MLP, batched embedding lookup, dot interaction (tril index), top MLP, BCE, SGD.

With world size > 1 the MLPs are data parallel (DDP) and the tables model parallel: each rank looks up its own
tables for the whole global batch and an all_to_all (``all_to_all_single`` with split sizes, inside an autograd
Function) gives every rank the pooled embeddings of its local batch; the backward sends the gradients back.
The embedding optimizer is fused into the lookup's backward (collectors.embedding.tbe); SGD updates the MLPs.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from collectors.embedding.tbe import make_lookup
from collectors.workloads.dlrm_presets import DlrmConfig
from collectors.workloads.sharders import RankLayout


def mlp(widths: tuple[int, ...], *, sigmoid_last: bool) -> nn.Sequential:
    """Linear layers between consecutive widths, ReLU after each but the last (sigmoid there if asked)."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(widths[:-1], widths[1:])):
        layers.append(nn.Linear(n_in, n_out))
        last = i == len(widths) - 2
        layers.append(nn.Sigmoid() if last and sigmoid_last else nn.Identity() if last else nn.ReLU())
    return nn.Sequential(*[layer for layer in layers if not isinstance(layer, nn.Identity)])


class PooledAllToAll(torch.autograd.Function):
    """Forward: [B, d_own] pooled rows of this rank's tables -> [b, sum d] of every table for the local batch.
    Backward: the reverse exchange of the gradients. Split sizes come from :class:`RankLayout`."""

    @staticmethod
    def forward(ctx: Any, pooled: torch.Tensor, layout: RankLayout, rank: int) -> torch.Tensor:
        ctx.layout, ctx.rank = layout, rank
        out = pooled.new_empty(sum(layout.recv_splits(rank)))
        dist.all_to_all_single(out, pooled.contiguous().view(-1), output_split_sizes=layout.recv_splits(rank),
                               input_split_sizes=layout.send_splits(rank))
        b = layout.local_batch
        chunks = out.split(layout.recv_splits(rank))
        return torch.cat([c.view(b, d) for c, d in zip(chunks, layout.dims)], dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        layout, rank = ctx.layout, ctx.rank
        send = torch.cat([g.contiguous().view(-1) for g in grad.split(list(layout.dims), dim=1)])
        out = grad.new_empty(sum(layout.send_splits(rank)))
        dist.all_to_all_single(out, send, output_split_sizes=layout.send_splits(rank),
                               input_split_sizes=layout.recv_splits(rank))
        return out.view(layout.batch_size, layout.dims[rank]), None, None


def block_order(layout: RankLayout) -> list[int] | None:
    """For each table (in table order), the position of its column block after the exchange (tables of rank 0,
    then rank 1, ...); None when the exchange already yields table order."""
    order = layout.column_order
    return None if order == sorted(order) else [order.index(t) for t in range(len(order))]


def to_table_order(pooled: torch.Tensor, blocks: list[int] | None, dim: int) -> torch.Tensor:
    """Reorder exchanged columns into table order (every table ``dim`` wide), given :func:`block_order`."""
    if blocks is None:
        return pooled
    parts = pooled.split(dim, dim=1)
    return torch.cat([parts[i] for i in blocks], dim=1)


class DotInteraction(nn.Module):
    """Pairwise dot products of the bottom-MLP output and the T embeddings (strict lower triangle, the tril
    index), concatenated after the bottom-MLP output."""

    def __init__(self, num_tables: int):
        super().__init__()
        n = num_tables + 1
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)

    def forward(self, dense: torch.Tensor, embedded: torch.Tensor) -> torch.Tensor:
        b, d = dense.shape
        stacked = torch.cat([dense, embedded], dim=1).view(b, -1, d)
        z = torch.bmm(stacked, stacked.transpose(1, 2))
        return torch.cat([dense, z[:, self.li, self.lj]], dim=1)


class DlrmRank(nn.Module):
    """The part of the DLRM one rank runs. ``forward(dense, indices, offsets) -> click probability [b, 1]``."""

    def __init__(self, config: DlrmConfig, layout: RankLayout, rank: int, device: torch.device, seed: int):
        super().__init__()
        self.layout, self.rank = layout, rank
        self.world_size = layout.world_size
        self.bottom = mlp(config.bottom_mlp, sigmoid_last=False).to(device)
        self.top = mlp((config.interaction_width(), *config.top_mlp), sigmoid_last=True).to(device)
        own = layout.tables[rank]
        self.lookup = (make_lookup([(config.tables[t].num_rows, config.tables[t].dim) for t in own],
                                   implementation=config.embedding, device=device, optimizer="exact_sgd",
                                   lr=config.lr, seed=seed + 1000 * own[0]) if own else None)
        self.interaction = DotInteraction(len(config.tables)).to(device)
        self.dim = config.dim
        self.blocks = block_order(layout)
        self._empty = torch.zeros(layout.batch_size, 0, device=device, requires_grad=True)

    def wrap_ddp(self) -> None:
        """Data-parallel MLPs across ranks (gloo on CPU, NCCL on CUDA)."""
        self.bottom = nn.parallel.DistributedDataParallel(self.bottom)
        self.top = nn.parallel.DistributedDataParallel(self.top)

    def embed(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Pooled embeddings of every table for this rank's local batch, in table order: [b, T*D]."""
        pooled = self.lookup(indices, offsets) if self.lookup is not None else self._empty
        if self.world_size > 1:
            pooled = PooledAllToAll.apply(pooled, self.layout, self.rank)
        return to_table_order(pooled, self.blocks, self.dim)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        return self.top(self.interaction(x, self.embed(indices, offsets)))

    def mlp_parameters(self) -> list[nn.Parameter]:
        return [*self.bottom.parameters(), *self.top.parameters()]


class DlrmTrainer:
    """One rank's DLRM training loop: ``prepare(batches)`` builds the inputs, ``step(k)`` runs iteration k
    (zero_grad, forward, BCE, backward with the fused embedding update and the all_to_all, SGD step)."""

    def __init__(self, config: DlrmConfig, layout: RankLayout, rank: int, seed: int, device: torch.device):
        from collectors.workloads.dlrm_data import DlrmBatches

        torch.manual_seed(seed)
        self.model = DlrmRank(config, layout, rank, device, seed)
        if layout.world_size > 1:
            self.model.wrap_ddp()
        self.optimizer = torch.optim.SGD(self.model.mlp_parameters(), lr=config.lr)
        self.loss = nn.BCELoss()
        self.data = DlrmBatches(config, layout, rank, seed, device)
        self.batches: dict[int, Any] = {}
        self.stats: dict[int, list[dict[str, Any]]] = {}

    def prepare(self, batch_ids: list[int]) -> None:
        for k in batch_ids:
            if k not in self.batches:
                self.batches[k], self.stats[k] = self.data.make(k)

    def step(self, k: int) -> None:
        batch = self.batches[k]
        self.optimizer.zero_grad()
        out = self.model(batch.dense, batch.indices, batch.offsets)
        self.loss(out, batch.labels).backward()
        self.optimizer.step()

    def info(self) -> dict[str, Any]:
        return {"tables": list(self.model.layout.tables[self.model.rank]),
                "mlp_parameters": sum(p.numel() for p in self.model.mlp_parameters())}
