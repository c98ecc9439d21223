"""Per-table statistics of a workload's embedding lookups (``embedding_batch_stats``), as the embedding model's
input columns: ``batch_size``, ``num_rows``, ``pooling_mean``, ``dim`` and ``reuse_factors`` (one entry per table).

A rank's tables are the rows it holds; pooling and reuse factors are averaged over the stored iterations. A batched
lookup (FBGEMM TBE) covers every table of its rank; per-table lookups (torch EmbeddingBag) take the tables in call
order (forward) and in reverse order (backward, as autograd runs them).

Each table also keys the microbenchmark of its lookup (:meth:`EmbeddingStats.lookup`): E, D, B, L (the mean pooling
rounded as ``collect ops --from-traces`` configures it) and its index source, so that a lookup whose exact tables
were microbenchmarked is priced by that measurement (:mod:`simulator.measured_shapes`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pmdb.store import Store
from pmdb.traces.graph import Op
from pmdb.traces.opmap import BATCHED_MARKERS, Mapped



class EmbeddingStats:
    """rank -> per-table statistics, and counters that hand per-table lookups their table."""

    def __init__(self, per_rank: dict[int, list[dict[str, Any]]] | None = None):
        self.per_rank = per_rank or {}
        self._seen: dict[tuple[int, str], int] = {}

    @classmethod
    def from_store(cls, store: Store, workload_id: int | None) -> "EmbeddingStats":
        if workload_id is None:
            return cls()
        frame = store.query("SELECT rank, table_index, batch_size, num_rows, dim, pooling_mean, reuse_factors "
                            "FROM v_embedding_batch_stats WHERE workload_id = ? AND rank IS NOT NULL "
                            "ORDER BY rank, table_index, iteration", [int(workload_id)])
        per_rank: dict[int, list[dict[str, Any]]] = {}
        for (rank, table), group in frame.groupby(["rank", "table_index"], sort=True):
            per_rank.setdefault(int(rank), []).append({
                "table_index": int(table), "batch_size": int(group["batch_size"].iloc[0]),
                "num_rows": int(group["num_rows"].iloc[0]), "dim": int(group["dim"].iloc[0]),
                "pooling_mean": float(group["pooling_mean"].mean()),
                "reuse_factors": np.mean(np.stack([np.asarray(r, dtype=float) for r in group["reuse_factors"]]),
                                         axis=0).tolist()})
        from collectors.ops.from_traces import workload_tables

        for rank, specs in workload_tables(store, int(workload_id)).items():
            by_index = {t["table"]: t for t in specs}
            for table in per_rank.get(rank, []):
                spec = by_index.get(table["table_index"])
                if spec is not None:
                    table["L"], table["source"] = spec["L"], spec["source"]
        return cls(per_rank)

    def reset(self) -> None:
        self._seen.clear()

    def for_op(self, rank: int, node: Op, mapped: Mapped) -> dict[str, Any] | None:
        """The model's list columns for one lookup op of ``rank`` (None when the rank's tables are unknown)."""
        return self.lookup(rank, node, mapped)[0]

    def lookup(self, rank: int, node: Op, mapped: Mapped
               ) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
        """(the model's list columns, the tables as the microbenchmark configures them: {E, D, B, L, source}; None
        for a table without its stored source) of one lookup op of ``rank``; (None, None) when its tables are
        unknown."""
        tables = self.per_rank.get(rank)
        if not tables:
            return None, None
        if not any(m in node.name.lower() for m in BATCHED_MARKERS):
            k = self._seen.get((rank, mapped.pass_), 0)
            self._seen[(rank, mapped.pass_)] = k + 1
            index = k if mapped.pass_ == "fwd" else len(tables) - 1 - k
            if not 0 <= index < len(tables):
                return None, None
            tables = [tables[index]]
        configured = None
        if all("source" in t for t in tables):
            configured = [{"E": int(t["num_rows"]), "D": int(t["dim"]), "B": int(t["batch_size"]),
                           "L": t["L"], "source": t["source"]} for t in tables]
        return {"batch_size": [t["batch_size"] for t in tables], "num_rows": [t["num_rows"] for t in tables],
                "pooling_mean": [t["pooling_mean"] for t in tables], "dim": [t["dim"] for t in tables],
                "reuse_factors": [t["reuse_factors"] for t in tables], "B": tables[0]["batch_size"],
                "T": len(tables)}, configured

