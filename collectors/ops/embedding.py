"""The batched embedding lookup (op 'embedding_lookup'), recorded for two implementations: FBGEMM's TBE
('fbgemm_tbe') and torch EmbeddingBag ('torch_embedding_bag'). Backward includes the optimizer (fused for FBGEMM).

A config is {"B", "E": [...], "D": [...], "L": [...] (target pooling per table), "sources": [...] (index source spec
per table), "seed", "optimizer"}. The indices of the measured batch are generated from it (seeded), and the stored
params are B, T and per table E, D and the *measured* mean pooling L; the 17 reuse factors of each table's indices go
to embedding_batch_stats (see ``Built.stats``). On a CPU ``Built.loop`` runs one training iteration of the lookup on
the next of a pool of further batches drawn from the same sources (:func:`loop_batches` of them): the 'loop' cache
state's timings (:func:`collectors.ops.timer.time_loop`).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from collectors.embedding.indices import DatasetSource, make_source
from collectors.embedding.reuse import reuse_factors
from collectors.embedding.tbe import IMPLEMENTATIONS, make_lookup, to_tensors
from collectors.ops.catalogue import QUICK_COUNT, Axis, BuildContext, Built, OpSpec, register
from collectors.ops.timer import DEFAULT_FLUSH_BYTES
from pmdb.errors import PmdbError

SHARED_DATASETS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "dlrm_datasets"
HEAVY_POOLING = 20.0  # method.md section 5: heavy tables have mean L >= 20
DEFAULT_COUNT = 320
LARGE_COUNT = 60
LOOP_MAX_BATCHES = 32          # fresh batches the 'loop' timing cycles through, at most
LOOP_POOL_BYTES = 256 * 2 ** 20  # bound on their indices and offsets (bytes)
_CONFIG_KEYS = {"B", "E", "D", "L", "sources", "seed", "optimizer"}


class Ranges(NamedTuple):
    """Where one stratum of embedding configs is drawn: batch sizes, table count, rows per table (log-uniform),
    dims, target pooling (light below HEAVY_POOLING, heavy above), the bound on the estimated forward µs and the
    bounds on the tables' total bytes (fp32)."""

    batch: tuple[int, ...]
    tables: tuple[int, int]
    rows: tuple[int, int]
    dims: tuple[int, ...]
    pooling: tuple[float, float]
    bound_us: float
    max_table_bytes: float
    min_table_bytes: float = 0.0
    heavy_share: float = 0.5          # share of tables drawn heavy (pooling above HEAVY_POOLING)
    max_memory_bytes: float = float("inf")  # bound on the config's estimated memory (tables, state, batch buffers)


_RANGES = {
    "default": Ranges((64, 128, 256, 512, 1024, 2048), (1, 8), (1_000, 500_000), (8, 16, 32, 64, 128), (1.0, 100.0),
                      2_000.0, 32 * 2 ** 20),
    # tables above the last-level cache, as big as the DLRM presets' (dlrm_default: 8 x 200k x 64, 410 MB;
    # dlrm_ddp: 8 x 80k x 128, 328 MB) and the generated tasks' tables on one rank (up to 1e6 rows each)
    "big": Ranges((128, 256, 512, 1024), (1, 16), (50_000, 1_000_000), (32, 64, 128), (1.0, 100.0),
                  4_000.0, 1 * 2 ** 30, 64 * 2 ** 20),
    "large": Ranges((1024, 2048, 4096, 8192), (4, 32), (100_000, 10_000_000), (32, 64, 128, 256), (1.0, 200.0),
                    400_000.0, 8 * 2 ** 30),
    # one rank's share of the sharding study's heavy tasks (`pmdb shard --study`: 18-31 heavy tables of 64-dim rows,
    # E capped at 100k, ~10-16 tables and 250-400 MB per rank at world size 2, B 512: 1.2e7-4.2e7 lookups per
    # batch), beyond the 'big' stratum's lookup bound (its configs stop at ~9e6): every table heavy, many of them
    "heavy": Ranges((256, 512, 1024), (8, 20), (20_000, 1_000_000), (32, 64, 128), (20.0, 150.0),
                    40_000.0, 1 * 2 ** 30, 64 * 2 ** 20, heavy_share=1.0, max_memory_bytes=2.5 * 2 ** 30),
}
# the default sweep: DEFAULT_COUNT configs of the 'default' stratum (unchanged, so stores measured before keep
# them) plus BIG_COUNT of the 'big' one and HEAVY_COUNT of the 'heavy' one, each stratum from its own fixed seed
BIG_COUNT = 40
HEAVY_COUNT = 16
_SEEDS = {"default": 20240, "large": 20241, "big": 20242, "heavy": 20243}


def default_sources() -> list[str]:
    """uniform, two Zipf exponents and, when the shared DLRM statistics are present, their first entries."""
    sources = ["uniform", "zipf:1.05", "zipf:1.2"]
    for stats in sorted(SHARED_DATASETS.glob("*/locality_stats.txt")):
        sources.append(f"locality:{stats}")
    return sources


def _lookups(c: dict[str, Any]) -> float:
    return c["B"] * float(np.dot(c["L"], c["D"]))


def _flops(c: dict[str, Any]) -> float:
    return _lookups(c)


def _bytes_moved(c: dict[str, Any]) -> float:
    return 4.0 * (_lookups(c) + c["B"] * sum(c["D"])) + 8.0 * c["B"] * sum(c["L"])


def _memory(c: dict[str, Any]) -> float:
    tables = table_bytes(c)
    state = tables if c.get("optimizer", "exact_sgd") == "exact_adagrad" else 0.0
    return tables + state + 3 * _bytes_moved(c)


def _draw(rng: np.random.Generator, ranges: Ranges, sources: list[str], seed: int, optimizer: str
          ) -> dict[str, Any]:
    (t_lo, t_hi), (e_lo, e_hi), (l_lo, l_hi) = ranges.tables, ranges.rows, ranges.pooling
    tables = int(rng.integers(t_lo, t_hi + 1))
    heavy = rng.random(tables) < ranges.heavy_share
    light_l = np.exp(rng.uniform(np.log(l_lo), np.log(HEAVY_POOLING), tables))
    heavy_l = np.exp(rng.uniform(np.log(HEAVY_POOLING), np.log(l_hi), tables))
    return {"B": int(rng.choice(ranges.batch)),
            "E": [int(round(np.exp(v))) for v in rng.uniform(np.log(e_lo), np.log(e_hi), tables)],
            "D": [int(rng.choice(ranges.dims)) for _ in range(tables)],
            "L": [round(float(v), 2) for v in np.where(heavy, heavy_l, light_l)],
            "sources": [sources[int(rng.integers(len(sources)))] for _ in range(tables)],
            "seed": seed, "optimizer": optimizer}


def table_bytes(c: dict[str, Any]) -> float:
    """Bytes of a config's fp32 tables."""
    return 4.0 * float(np.dot(c["E"], c["D"]))


def _fits(spec: OpSpec, c: dict[str, Any], ranges: Ranges) -> bool:
    return (spec.estimate_us(c) <= ranges.bound_us and spec.memory(c) <= ranges.max_memory_bytes
            and ranges.min_table_bytes <= table_bytes(c) <= ranges.max_table_bytes)


def _stratum(spec: OpSpec, which: str, count: int, rng: np.random.Generator, sources: list[str],
             optimizer: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    attempts = 0
    while len(out) < count and attempts < 200 * max(count, 1):
        attempts += 1
        config = _draw(rng, _RANGES[which], sources, seed=attempts, optimizer=optimizer)
        if _fits(spec, config, _RANGES[which]):
            out.append(config)
    return out


def make_configs(spec: OpSpec, sweep: str, rng: np.random.Generator, sample: int, *,
                 sources: list[str] | None = None, optimizer: str = "exact_sgd") -> list[dict[str, Any]]:
    """Embedding configs: 'default' (the default stratum plus BIG_COUNT configs with tables above the cache and
    HEAVY_COUNT with many heavy tables above it),
    'quick' and 'large' draw from fixed seeds (the same configs every time, so a sweep resumes), 'random' from
    ``rng`` within the large ranges."""
    sources = sources or default_sources()
    if sweep == "random":
        return _stratum(spec, "large", sample, rng, sources, optimizer)
    which = "large" if sweep == "large" else "default"
    count = {"default": DEFAULT_COUNT, "quick": QUICK_COUNT, "large": LARGE_COUNT}[sweep]
    out = _stratum(spec, which, count, np.random.default_rng(_SEEDS[which]), sources, optimizer)
    if sweep == "default":
        for extra, extra_count in (("big", BIG_COUNT), ("heavy", HEAVY_COUNT)):
            out += _stratum(spec, extra, extra_count, np.random.default_rng(_SEEDS[extra]), sources, optimizer)
    return out


def check_config(given: dict[str, Any], *, sources: list[str] | None = None,
                 optimizer: str = "exact_sgd") -> dict[str, Any]:
    """Validate an explicit embedding config: B and equally long E, D, L lists (sources default to 'uniform')."""
    unknown = sorted(set(given) - _CONFIG_KEYS)
    if unknown:
        raise PmdbError(f"embedding_lookup: unknown parameter(s) {', '.join(unknown)} "
                        f"(parameters: B, E, D, L as lists per table, optional sources, seed, optimizer)")
    missing = [k for k in ("B", "E", "D", "L") if k not in given]
    if missing:
        raise PmdbError(f"embedding_lookup: missing parameter(s) {', '.join(missing)}")
    tables = given["E"] if isinstance(given["E"], list) else None
    if not tables or any(not isinstance(given[k], list) or len(given[k]) != len(tables) for k in ("D", "L")):
        raise PmdbError("embedding_lookup: E, D and L must be lists with one value per table")
    ints = [given["B"], *given["E"], *given["D"]]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or v < 1 or v != int(v) for v in ints):
        raise PmdbError("embedding_lookup: B, E and D must be positive integers")
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in given["L"]):
        raise PmdbError("embedding_lookup: pooling factors L must be positive numbers")
    chosen = given.get("sources") or [(sources or ["uniform"])[0]] * len(tables)
    if len(chosen) != len(tables):
        raise PmdbError("embedding_lookup: give one index source per table")
    for spec in set(chosen):
        make_source(spec, 0)  # raises a clear error for a bad spec
    return {"B": int(given["B"]), "E": [int(v) for v in given["E"]], "D": [int(v) for v in given["D"]],
            "L": [float(v) for v in given["L"]], "sources": list(chosen), "seed": int(given.get("seed", 0)),
            "optimizer": given.get("optimizer", optimizer)}


def build(c: dict[str, Any], ctx: BuildContext) -> Built:
    rng = np.random.default_rng([c["seed"], ctx.seed])
    per_table, stats, sources = [], [], []
    for t, (rows, dim, pooling, spec) in enumerate(zip(c["E"], c["D"], c["L"], c["sources"])):
        source = make_source(spec, ctx.seed)
        sources.append(source)
        indices, lengths = source.batch(rows, c["B"], pooling, rng)
        label = source.label
        if isinstance(source, DatasetSource) and source.table is None:
            label = f"{label}:{source.last_table}"
        per_table.append((indices, lengths))
        stats.append({"table_index": t, "batch_size": c["B"], "num_rows": rows, "dim": dim,
                      "pooling_mean": float(lengths.mean()), "reuse_factors": reuse_factors(indices).tolist(),
                      "index_source": label, "optimizer": c["optimizer"]})
    indices, offsets = to_tensors(per_table, ctx.device)
    lookup = make_lookup(list(zip(c["E"], c["D"])), ctx.implementation, ctx.device, c["optimizer"], ctx.lr, ctx.seed)
    params = {"B": c["B"], "T": len(c["E"]), "E": list(c["E"]), "D": list(c["D"]),
              "L": [s["pooling_mean"] for s in stats]}
    out = lookup(indices, offsets)
    grad = torch.ones_like(out)

    def bwd() -> None:
        out.backward(grad, retain_graph=True)

    loop = None
    if ctx.device.type == "cpu":
        def pool() -> list[tuple[torch.Tensor, torch.Tensor]]:   # drawn on the loop's first call, after the batch
            return [to_tensors([s.batch(rows, c["B"], pooling, rng)
                                for s, rows, pooling in zip(sources, c["E"], c["L"])], ctx.device)
                    for _ in range(loop_batches(c))]
        loop = _training_loop(lookup, pool, grad)
    return Built(lambda: lookup(indices, offsets), bwd, params, stats, keep=(lookup, out, grad, indices, offsets),
                 release=lambda: release_optimizers(lookup), loop=loop, engine_bwd=True)


def loop_batches(c: dict[str, Any]) -> int:
    """How many fresh batches the 'loop' timing cycles through: enough that the rows a batch touches (at most its
    lookups' rows, bytes) are evicted by the others before it comes round again (twice the flush size, which
    exceeds the last-level cache), at least 2, at most LOOP_MAX_BATCHES, and their indices within
    LOOP_POOL_BYTES."""
    lookups = [c["B"] * float(pooling) for pooling in c["L"]]
    touched = sum(min(float(rows), n) * dim * 4.0 for rows, n, dim in zip(c["E"], lookups, c["D"]))
    wanted = math.ceil(2.0 * DEFAULT_FLUSH_BYTES / max(touched, 1.0))
    fits = int(LOOP_POOL_BYTES // max(8.0 * (sum(lookups) + c["B"] * len(lookups)), 1.0))
    return max(2, min(wanted, LOOP_MAX_BATCHES, fits))


def _training_loop(lookup: torch.nn.Module, make_pool: Callable[[], list[tuple[torch.Tensor, torch.Tensor]]],
                   grad: torch.Tensor) -> Callable[[], tuple[float, float]]:
    """One training iteration per call on the next batch of the pool (``make_pool()``, drawn on the first call):
    the forward, then its backward (which applies the fused update); returns their (µs, µs), the backward with the
    release of the forward's output."""
    pool: list[tuple[torch.Tensor, torch.Tensor]] = []
    position = [0]

    def step() -> tuple[float, float]:
        if not pool:
            pool.extend(make_pool())
        indices, offsets = pool[position[0] % len(pool)]
        position[0] += 1
        start = time.perf_counter_ns()
        out = lookup(indices, offsets)
        middle = time.perf_counter_ns()
        out.backward(grad)
        del out
        end = time.perf_counter_ns()
        return (middle - start) / 1e3, (end - middle) / 1e3

    return step


def release_optimizers(lookup: torch.nn.Module) -> None:
    """Empty the per-table optimizers of a torch EmbeddingBag lookup. Each table's weight holds a post-accumulate
    -grad hook whose closure holds its optimizer, which holds the weight: a cycle through a tensor that Python's
    garbage collector never frees, so without this every measured table stayed in memory (RSS grew by the table
    size per config). FBGEMM lookups have no such optimizers; nothing to do for them."""
    for opt in getattr(lookup.inner, "_optimizers", ()):
        opt.state.clear()
        opt.param_groups.clear()


register(OpSpec(
    name="embedding_lookup", family="embedding",
    axes=(Axis("B", (), (), 1, 65536),),
    build=build, flops=_flops, bytes_moved=_bytes_moved, memory=_memory,
    implementations=IMPLEMENTATIONS, default_count=DEFAULT_COUNT,
    make_configs=make_configs, check_config=check_config, loops=True))
