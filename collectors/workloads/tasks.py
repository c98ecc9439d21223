"""Random DLRM tasks for sharding studies (method.md section 8, after the reference's generate_random_dlrm_tasks).

A task is a set of embedding tables for a world size: round-down of U[0.7, 1.3) x 13 x world_size tables (at least
one), all heavy (L >= 20) for a heavy task, any for a normal one; a draw whose tables need more than 80 % of the
memory given is rejected and drawn again. Task i of seed S uses the rng ``default_rng(task_seed)`` with
``task_seed = SeedSequence([S, i])``'s first word, stored with the task, so every task can be drawn again alone.

Where the table shapes come from:

- **Published statistics** (``--datasets DIR``, e.g. ../shared/data/dlrm_datasets): every ``locality_stats.txt`` below
  DIR is one dataset year; task i uses year i // 2 mod years (heavy/normal alternate with ``kind='both'``). The files
  give, per data file (entry), the batch size B, the table count T (``_t<T>_`` in its name), the lookups and unique
  indices of the batch, but not each table's shape, so a table is drawn from one entry as follows: L ~ lognormal
  with the entry's mean L = lookups / (B T) and the year's published share of heavy tables (103/856 in 2021,
  166/788 in 2022, the paper section II-C; 15 % otherwise), i.e. the wide solution of mean = L and P(L >= 20) = h
  (a heavy table is drawn from the same law above 20); E = the unique rows such a table shows in the published batch,
  B L / (average reuse of the entry), at least 100; D = ``dim``; the index stream follows the entry's reuse
  histogram (``locality:<file>:<entry>``).
- **Built-in** (no DIR): L ~ lognormal(ln 3, 1.5) (mean 9.3, 10 % heavy, as skewed as the published data), E
  log-uniform in [1e3, 1e6], D = ``dim``, Zipf(1.05) index streams.

``max_rows`` caps E for a small machine (the cap is recorded in each task's tables through the capped E).
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from pmdb.errors import PmdbError

TABLES_PER_RANK = 13
COUNT_RANGE = (0.7, 1.3)
MEMORY_SHARE = 0.8
HEAVY_POOLING = 20.0
MIN_ROWS = 100
PUBLISHED_HEAVY = {856: 103 / 856, 788: 166 / 788}  # table count of the year's data -> heavy share (paper)
DEFAULT_HEAVY_SHARE = 0.15
KINDS = ("heavy", "normal", "both")
_NORMAL = NormalDist()
_TABLE_COUNT = re.compile(r"_t(\d+)_")


def memory_bytes() -> int | None:
    """This machine's physical memory (bytes), or None where the OS does not say. Here, not in
    :mod:`collectors.workloads.requests`, so that `pmdb collect tasks` does not import torch (~2-3 s)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def lognormal_for(mean: float, heavy_share: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this mean and P(L >= 20) = heavy_share (the wide root: a narrow law
    cannot put its mass both near 0 and above 20). When no lognormal with this mean has that many heavy tables,
    the one with this mean and the largest heavy share (sigma = sqrt(2 ln(20 / mean))) is used."""
    if not 0 < heavy_share < 1 or not mean > 0:
        raise PmdbError(f"cannot fit a pooling law to mean {mean} and heavy share {heavy_share}")
    z = _NORMAL.inv_cdf(1 - heavy_share)  # (ln 20 - mu) / sigma
    # mu = ln 20 - z sigma and mu + sigma^2 / 2 = ln mean  =>  sigma^2 / 2 - z sigma + ln(20 / mean) = 0
    disc = z * z - 2 * math.log(HEAVY_POOLING / mean)
    sigma = z + math.sqrt(disc) if disc >= 0 else math.sqrt(2 * math.log(HEAVY_POOLING / mean))
    return math.log(mean) - sigma * sigma / 2, sigma


def draw_pooling(rng: np.random.Generator, mu: float, sigma: float, heavy: bool) -> float:
    """L from lognormal(mu, sigma), conditioned on L >= 20 when ``heavy`` (inverse CDF, no rejection)."""
    low = _NORMAL.cdf((math.log(HEAVY_POOLING) - mu) / sigma) if heavy else 0.0
    u = low + (1 - low) * rng.random()
    return math.exp(mu + sigma * _NORMAL.inv_cdf(min(max(u, 1e-12), 1 - 1e-12)))


@dataclass(frozen=True)
class EntryLaw:
    """The table law of one published locality entry."""

    stats_file: str
    entry: str
    batch_size: int
    mu: float
    sigma: float
    avg_reuse: float


def published_laws(root: Path) -> list[list[EntryLaw]]:
    """Per dataset year (each locality_stats.txt below ``root``), the table law of each of its entries."""
    from collectors.embedding.locality import load_locality_stats

    files = sorted(Path(root).rglob("locality_stats.txt"))
    if not files:
        raise PmdbError(f"no locality_stats.txt below {root} (expected e.g. ../shared/data/dlrm_datasets)")
    years = []
    for file in files:
        laws = []
        for entry in load_locality_stats(str(file.resolve())):
            match = _TABLE_COUNT.search(entry.name)
            if not (match and entry.batch_size and entry.avg_indices and entry.avg_unique):
                continue
            tables = int(match.group(1))
            mean_l = entry.avg_indices / (entry.batch_size * tables)
            mu, sigma = lognormal_for(mean_l, PUBLISHED_HEAVY.get(tables, DEFAULT_HEAVY_SHARE))
            laws.append(EntryLaw(str(file.resolve()), entry.name, entry.batch_size, mu, sigma,
                                 entry.avg_indices / entry.avg_unique))
        if laws:
            years.append(laws)
    if not years:
        raise PmdbError(f"the locality_stats.txt files below {root} have no usable entries")
    return years


def _published_table(rng: np.random.Generator, laws: list[EntryLaw], heavy: bool, dim: int) -> dict[str, Any]:
    law = laws[int(rng.integers(0, len(laws)))]
    pooling = draw_pooling(rng, law.mu, law.sigma, heavy)
    rows = max(MIN_ROWS, int(round(law.batch_size * pooling / law.avg_reuse)))
    return {"num_rows": rows, "dim": dim, "pooling": pooling, "source": f"locality:{law.stats_file}:{law.entry}"}


def _builtin_table(rng: np.random.Generator, heavy: bool, dim: int) -> dict[str, Any]:
    pooling = min(500.0, max(0.05, draw_pooling(rng, math.log(3.0), 1.5, heavy)))
    rows = int(round(10 ** rng.uniform(3, 6)))
    return {"num_rows": rows, "dim": dim, "pooling": pooling, "source": "zipf:1.05"}


def task_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def generate(count: int, seed: int, world_size: int, *, memory_bytes: int, kind: str = "both", dim: int = 64,
             datasets: Path | None = None, max_rows: int | None = None,
             max_attempts: int = 1000) -> list[dict[str, Any]]:
    """``count`` task rows (kind, seed, world_size, tables, memory_cap_bytes) for the ``tasks`` table."""
    if kind not in KINDS:
        raise PmdbError(f"unknown task kind {kind!r}: use {', '.join(KINDS)}")
    if count < 1 or world_size < 1 or dim < 1 or (max_rows is not None and max_rows < 1):
        raise PmdbError("count, world size, dim and max rows must be >= 1")
    years = published_laws(datasets) if datasets is not None else None
    cap = int(MEMORY_SHARE * memory_bytes)
    lo = int(TABLES_PER_RANK * world_size * COUNT_RANGE[0])
    hi = max(lo + 1, int(TABLES_PER_RANK * world_size * COUNT_RANGE[1]))
    out = []
    for i in range(count):
        heavy = kind == "heavy" or (kind == "both" and i % 2 == 0)
        seed_i = task_seed(seed, i)
        rng = np.random.default_rng(seed_i)
        for _ in range(max_attempts):
            n = max(1, int(rng.integers(lo, hi)))
            if years is not None:
                laws = years[(i // 2) % len(years)]
                tables = [_published_table(rng, laws, heavy, dim) for _ in range(n)]
            else:
                tables = [_builtin_table(rng, heavy, dim) for _ in range(n)]
            if max_rows is not None:
                for t in tables:
                    t["num_rows"] = min(t["num_rows"], max_rows)
            if sum(t["num_rows"] * t["dim"] * 4 for t in tables) <= cap:
                break
        else:
            raise PmdbError(f"task {i}: no draw of tables fits in {cap} bytes after {max_attempts} attempts "
                            f"(lower --max-rows or --dim, or give more --memory)")
        out.append({"kind": "heavy" if heavy else "normal", "seed": seed_i, "world_size": world_size,
                    "tables": tables, "memory_cap_bytes": cap})
    return out
