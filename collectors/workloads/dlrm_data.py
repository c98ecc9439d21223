"""Synthetic DLRM batches, deterministic per (seed, batch, table), and the statistics of their index streams.

Table t's indices in batch k come from ``make_source(index_sources[t], seed + t)`` with the rng
``default_rng([seed, k, t])``, so the same table sees the same stream whichever rank holds it (plans are comparable).
Dense features and labels are drawn for the global batch from ``default_rng([seed, k, 2**31])`` and sliced per rank,
so they do not depend on the world size either.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from collectors.embedding.indices import make_source
from collectors.embedding.reuse import reuse_factors
from collectors.embedding.tbe import to_tensors
from collectors.workloads.dlrm_presets import DlrmConfig
from collectors.workloads.sharders import RankLayout


@dataclass
class DlrmBatch:
    """One rank's inputs of one iteration: dense [b, F], indices/offsets (FBGEMM layout, global batch B of its own
    tables), labels [b, 1]."""

    dense: torch.Tensor
    indices: torch.Tensor
    offsets: torch.Tensor
    labels: torch.Tensor


class DlrmBatches:
    """Generates a rank's batches and records per-table statistics of each."""

    def __init__(self, config: DlrmConfig, layout: RankLayout, rank: int, seed: int, device: torch.device):
        self.config, self.layout, self.rank, self.seed, self.device = config, layout, rank, seed, device
        self.sources = {t: make_source(config.index_sources[t], seed + t) for t in layout.tables[rank]}

    def make(self, batch: int) -> tuple[DlrmBatch, list[dict[str, Any]]]:
        """Batch number ``batch`` and one statistics row per own table (pooling_mean, reuse_factors, ...)."""
        cfg, layout = self.config, self.layout
        per_table, stats = [], []
        for t in layout.tables[self.rank]:
            spec = cfg.tables[t]
            rng = np.random.default_rng([self.seed, batch, t])
            indices, lengths = self.sources[t].batch(spec.num_rows, layout.batch_size, spec.pooling, rng)
            per_table.append((indices, lengths))
            stats.append({"table_index": t, "batch_size": layout.batch_size, "num_rows": spec.num_rows,
                          "dim": spec.dim, "pooling_mean": float(np.mean(lengths)),
                          "reuse_factors": [float(x) for x in reuse_factors(indices)],
                          "index_source": _label(self.sources[t])})
        if per_table:
            indices_t, offsets_t = to_tensors(per_table, self.device)
        else:
            indices_t = torch.zeros(0, dtype=torch.int64, device=self.device)
            offsets_t = torch.zeros(1, dtype=torch.int64, device=self.device)
        rng = np.random.default_rng([self.seed, batch, 2**31])
        dense = rng.random((layout.batch_size, cfg.bottom_mlp[0]), dtype=np.float32)
        labels = rng.integers(0, 2, size=(layout.batch_size, 1)).astype(np.float32)
        lo = self.rank * layout.local_batch
        part = slice(lo, lo + layout.local_batch)
        return DlrmBatch(torch.from_numpy(dense[part].copy()).to(self.device), indices_t, offsets_t,
                         torch.from_numpy(labels[part].copy()).to(self.device)), stats


def _label(source: Any) -> str:
    """The source's label; for a dataset source that picks a table per batch, with the table it picked."""
    table = getattr(source, "last_table", None)
    label = source.label
    return label if table is None or label.endswith(f":{table}") else f"{label}:{table}"
