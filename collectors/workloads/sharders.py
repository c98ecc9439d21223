"""Embedding-table sharders of the paper's Table III (method.md section 8) and the plan -> per-rank layout.

A plan is a list: ``plan[t]`` is the rank holding table ``t``. Indexing sharders place tables directly (naive:
``t % n``; random: a seeded uniform rank per table). Cost sharders estimate a cost per table and assign the tables in
descending cost order (ties: lower table index first) to the least-loaded rank (ties: lower rank).
Everything here is a pure function of the tables and the world size.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pmdb.jsonfile import read_json
from pmdb.errors import PmdbError


@dataclass(frozen=True)
class TableSpec:
    """One embedding table: ``num_rows`` (E), ``dim`` (D), ``pooling`` (L, mean lookups per sample)."""

    num_rows: int
    dim: int
    pooling: float


COSTS: dict[str, Callable[[TableSpec], float]] = {
    "size_greedy": lambda t: float(t.num_rows),
    "lookup_greedy": lambda t: t.pooling * t.dim,
    "norm_lookup_greedy": lambda t: t.pooling / t.num_rows,
    "size_lookup_greedy": lambda t: t.pooling * t.dim * math.log10(t.num_rows),
}
SHARDERS = ("naive", "random", *COSTS)


def check_sharder(name: str) -> str:
    if name not in SHARDERS:
        raise PmdbError(f"unknown sharder {name!r}: use one of {', '.join(SHARDERS)} (or --sharding FILE)")
    return name


def table_costs(sharder: str, tables: Sequence[TableSpec]) -> list[float]:
    """The Table III cost of each table under a cost sharder."""
    return [COSTS[check_sharder(sharder)](t) for t in tables]


def greedy(costs: Sequence[float], world_size: int) -> list[int]:
    """Descending cost to the least-loaded rank."""
    loads = [0.0] * world_size
    plan = [0] * len(costs)
    for t in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        plan[t] = rank
        loads[rank] += costs[t]
    return plan


def shard(sharder: str, tables: Sequence[TableSpec], world_size: int, seed: int = 0) -> list[int]:
    """The plan (rank of each table) of a Table III sharder; ``seed`` drives the random sharder."""
    check_sharder(sharder)
    if world_size < 1:
        raise PmdbError(f"bad world size {world_size}: must be >= 1")
    if sharder == "naive":
        return [t % world_size for t in range(len(tables))]
    if sharder == "random":
        return [int(r) for r in np.random.default_rng(seed).integers(0, world_size, size=len(tables))]
    return greedy(table_costs(sharder, tables), world_size)


def check_plan(plan: Sequence[Any], num_tables: int, world_size: int, source: str = "plan") -> list[int]:
    """Validate a plan: one integer rank in [0, world_size) per table."""
    if len(plan) != num_tables:
        raise PmdbError(f"{source}: gives {len(plan)} table placements, the workload has {num_tables} tables")
    out = []
    for t, rank in enumerate(plan):
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
            raise PmdbError(f"{source}: table {t} is placed on {rank!r}; ranks are integers 0..{world_size - 1}")
        out.append(rank)
    return out


def load_plan(path: Path, num_tables: int, world_size: int) -> list[int]:
    """A plan from a JSON file: a list of ranks (one per table), ``{"plan": [...]}``, or ``{"<table>": rank}``."""
    data = read_json(path, "sharding")
    if isinstance(data, dict) and "plan" in data:
        data = data["plan"]
    if isinstance(data, dict):
        try:
            by_table = {int(k): v for k, v in data.items()}
        except ValueError:
            raise PmdbError(f"sharding file {path}: keys must be table indices") from None
        missing = sorted(set(range(num_tables)) - set(by_table))
        if missing or len(by_table) != num_tables:
            raise PmdbError(f"sharding file {path}: needs exactly tables 0..{num_tables - 1} (missing {missing[:5]})")
        data = [by_table[t] for t in range(num_tables)]
    if not isinstance(data, list):
        raise PmdbError(f"sharding file {path}: expected a list of ranks, {{\"plan\": [...]}} or {{table: rank}}")
    return check_plan(data, num_tables, world_size, f"sharding file {path}")


@dataclass(frozen=True)
class RankLayout:
    """Where the tables of a plan live and what the pooled-embedding all_to_all moves (elements, fp32).

    ``tables[r]``: global table indices held by rank r (ascending); ``dims[r]``: their summed dimension.
    Forward: rank r looks up its tables for the whole global batch and sends each rank s the rows of s's local
    batch, ``send_splits(r)[s] = local_batch * dims[r]`` elements; it receives ``recv_splits(r)[s] =
    local_batch * dims[s]``. Backward moves the gradients the opposite way (splits swapped).
    After the exchange the columns are in ``column_order`` (tables of rank 0, then rank 1, ...).
    """

    world_size: int
    batch_size: int
    local_batch: int
    tables: tuple[tuple[int, ...], ...]
    dims: tuple[int, ...]

    def send_splits(self, rank: int) -> list[int]:
        return [self.local_batch * self.dims[rank]] * self.world_size

    def recv_splits(self, rank: int) -> list[int]:
        return [self.local_batch * d for d in self.dims]

    @property
    def column_order(self) -> list[int]:
        return [t for held in self.tables for t in held]

    def bytes_sent(self, rank: int, itemsize: int = 4) -> int:
        """Forward bytes rank sends to other ranks (its own chunk stays local)."""
        return sum(n for s, n in enumerate(self.send_splits(rank)) if s != rank) * itemsize

    def bytes_received(self, rank: int, itemsize: int = 4) -> int:
        return sum(n for s, n in enumerate(self.recv_splits(rank)) if s != rank) * itemsize


def rank_layout(plan: Sequence[int], dims: Sequence[int], world_size: int, batch_size: int) -> RankLayout:
    """The per-rank tables and all_to_all split sizes of ``plan`` (the global batch must split evenly)."""
    plan = check_plan(list(plan), len(dims), world_size)
    if batch_size < world_size or batch_size % world_size:
        raise PmdbError(f"batch size {batch_size} must be a multiple of the world size {world_size}")
    held = tuple(tuple(t for t, r in enumerate(plan) if r == rank) for rank in range(world_size))
    return RankLayout(world_size, batch_size, batch_size // world_size, held,
                      tuple(sum(int(dims[t]) for t in ts) for ts in held))
