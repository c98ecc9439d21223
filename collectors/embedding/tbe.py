"""The batched embedding lookup: FBGEMM's table-batched embedding bag (TBE) or torch ``EmbeddingBag`` per table.

Both take the FBGEMM input layout: ``indices`` (int64, table-major: every bag of table 0 for the B samples, then
table 1, ...) and ``offsets`` (int64, T*B+1 bag boundaries), and return the sum-pooled embeddings [B, sum(D)].
Their backward applies the optimizer: FBGEMM fuses it into the backward kernel; the torch implementation runs it in
a post-accumulate-grad hook on each table's sparse gradient, so ``out.backward(grad)`` is one training step of the op.
"""
from __future__ import annotations

import weakref
from typing import Sequence

import torch
from torch import nn

from pmdb.errors import PmdbError

IMPLEMENTATIONS = ("fbgemm_tbe", "torch_embedding_bag")
OPTIMIZERS = ("exact_sgd", "exact_adagrad", "exact_row_wise_adagrad")
_INIT_BLOCK = 1 << 16  # elements drawn at random; larger tables repeat the block (values do not change timing)


def _init_uniform(weight: torch.Tensor, bound: float, seed: int) -> None:
    """Fill ``weight`` with seeded U(-bound, bound) values, cheaply for large tables."""
    flat = weight.view(-1)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    block = (torch.rand(min(flat.numel(), _INIT_BLOCK), generator=gen) * 2 - 1) * bound
    block = block.to(flat.device)
    with torch.no_grad():
        for start in range(0, flat.numel(), block.numel()):
            end = min(start + block.numel(), flat.numel())
            flat[start:end].copy_(block[:end - start])


class BatchedLookup(nn.Module):
    """A batched sum-pooling lookup over ``tables`` [(num_rows, dim), ...]; ``forward(indices, offsets)``."""

    def __init__(self, tables: Sequence[tuple[int, int]], implementation: str, device: torch.device,
                 optimizer: str, lr: float, inner: nn.Module):
        super().__init__()
        self.tables = [(int(e), int(d)) for e, d in tables]
        self.implementation = implementation
        self.device = device
        self.optimizer = optimizer
        self.lr = lr
        self.inner = inner

    @property
    def total_dim(self) -> int:
        return sum(d for _, d in self.tables)

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.inner(indices, offsets)


class _TorchBags(nn.Module):
    """One ``nn.EmbeddingBag(mode='sum', sparse=True)`` per table, each updated by its own optimizer in a
    post-accumulate-grad hook (the optimizer runs inside backward, like FBGEMM's fused one)."""

    def __init__(self, tables: Sequence[tuple[int, int]], device: torch.device, optimizer: str, lr: float):
        super().__init__()
        # _weight skips EmbeddingBag's own N(0, 1) initialisation (slow for big tables); make_lookup fills them
        self.bags = nn.ModuleList(nn.EmbeddingBag(e, d, mode="sum", sparse=True,
                                                  _weight=torch.empty(e, d, device=device)) for e, d in tables)
        self._optimizers = []
        for bag in self.bags:
            opt = (torch.optim.SGD([bag.weight], lr=lr) if optimizer == "exact_sgd"
                   else torch.optim.Adagrad([bag.weight], lr=lr))
            self._optimizers.append(opt)
            bag.weight.register_post_accumulate_grad_hook(self._stepper(opt))

    @staticmethod
    def _stepper(opt: torch.optim.Optimizer):
        """The hook holds its optimizer weakly: the optimizer holds the weight, and a strong reference from the
        weight's hook would make a cycle through a tensor that Python's collector never frees (every table of a
        discarded lookup stayed alive: RSS grew by each table's size in a sweep)."""
        ref = weakref.ref(opt)

        def step(param: torch.Tensor) -> None:
            live = ref()
            if live is not None:
                live.step()
            param.grad = None
        return step

    def forward(self, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        num_tables = len(self.bags)
        batch = (offsets.numel() - 1) // num_tables
        outs = []
        for t, bag in enumerate(self.bags):
            starts = offsets[t * batch:(t + 1) * batch + 1]
            lo, hi = int(starts[0]), int(starts[-1])
            outs.append(bag(indices[lo:hi], starts[:-1] - lo))
        return torch.cat(outs, dim=1)


def _fbgemm(tables: Sequence[tuple[int, int]], device: torch.device, optimizer: str, lr: float) -> nn.Module:
    try:
        from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
        from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
            ComputeDevice, OptimType, SplitTableBatchedEmbeddingBagsCodegen)
    except ImportError as exc:
        raise PmdbError(f"the fbgemm_tbe implementation needs fbgemm-gpu(-cpu) 1.8.0: {exc}") from None
    on_cuda = device.type == "cuda"
    location = EmbeddingLocation.DEVICE if on_cuda else EmbeddingLocation.HOST
    compute = ComputeDevice.CUDA if on_cuda else ComputeDevice.CPU
    specs = [(int(e), int(d), location, compute) for e, d in tables]
    return SplitTableBatchedEmbeddingBagsCodegen(specs, optimizer=OptimType(optimizer), learning_rate=lr,
                                                 device=device if on_cuda else None)


def make_lookup(tables: list[tuple[int, int]], implementation: str = "fbgemm_tbe", device: str | torch.device = "cpu",
                optimizer: str = "exact_sgd", lr: float = 0.01, seed: int = 0) -> BatchedLookup:
    """A :class:`BatchedLookup` over ``tables`` [(num_rows, dim)]; weights ~ U(-1/sqrt(E), 1/sqrt(E)), seeded.

    ``implementation``: 'fbgemm_tbe' or 'torch_embedding_bag'; ``optimizer``: 'exact_sgd', 'exact_adagrad', or
    (FBGEMM only) 'exact_row_wise_adagrad'; ``lr``: learning rate.
    """
    if not tables:
        raise PmdbError("an embedding lookup needs at least one table")
    for e, d in tables:
        if int(e) < 1 or int(d) < 1:
            raise PmdbError(f"bad embedding table ({e} rows, dim {d}): both must be >= 1")
    if implementation not in IMPLEMENTATIONS:
        raise PmdbError(f"unknown embedding implementation {implementation!r}: use {' or '.join(IMPLEMENTATIONS)}")
    if optimizer not in OPTIMIZERS:
        raise PmdbError(f"unknown embedding optimizer {optimizer!r}: use {', '.join(OPTIMIZERS)}")
    if implementation == "torch_embedding_bag" and optimizer == "exact_row_wise_adagrad":
        raise PmdbError("exact_row_wise_adagrad is FBGEMM-only: use exact_sgd or exact_adagrad with torch_embedding_bag")
    if not lr > 0:
        raise PmdbError(f"bad learning rate {lr}: must be > 0")
    dev = torch.device(device)
    if implementation == "fbgemm_tbe":
        inner = _fbgemm(tables, dev, optimizer, lr)
        weights = inner.split_embedding_weights()
    else:
        inner = _TorchBags(tables, dev, optimizer, lr)
        weights = [bag.weight.data for bag in inner.bags]
    for t, (weight, (e, _)) in enumerate(zip(weights, tables)):
        _init_uniform(weight, 1.0 / float(e) ** 0.5, seed + t)
    return BatchedLookup(tables, implementation, dev, optimizer, lr, inner)


def to_tensors(per_table: Sequence[tuple["np.ndarray", "np.ndarray"]],
               device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(indices, offsets) in the FBGEMM layout from per-table (indices, lengths) arrays of one batch."""
    import numpy as np

    indices = np.concatenate([np.asarray(i, dtype=np.int64) for i, _ in per_table])
    lengths = np.concatenate([np.asarray(n, dtype=np.int64) for _, n in per_table])
    offsets = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return (torch.from_numpy(indices).to(device), torch.from_numpy(offsets).to(device))
