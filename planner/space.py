"""The search space: which parallel configurations of a strategy are valid for a model, GPU count and batch.

Structure first (t1, t2, pp, dp with t1·t2·pp·dp = GPUs), then for each structure every micro-batch size, SUMMA
panel count, recomputation option, distributed-optimizer choice and NVLink placement (how many of each dimension's
GPUs share one NVLink domain: f_x divides x and the f_x multiply to the domain size gcd(GPUs, domain)).
"""
from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np

from pmdb.errors import PmdbError
from planner.candidates import RECOMPUTE, Candidates, Framework
from planner.model import Transformer

PANEL_MULTIPLES = (1, 2, 4, 8)


@lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    return tuple(d for d in range(1, n + 1) if n % d == 0)


def _tensor_ok(model: Transformer, t: int) -> bool:
    return all(x % t == 0 for x in (model.heads, model.kv_heads, model.hidden, model.ffn_hidden))


def structures(model: Transformer, strategy: str, gpus: int, global_batch: int) -> np.ndarray:
    """Rows (t1, t2, pp, dp) of the strategy that divide the model, the GPUs and the batch."""
    rows = []
    for t1 in divisors(gpus):
        if not _tensor_ok(model, t1):
            continue
        for t2 in divisors(gpus // t1):
            if strategy == "1d" and t2 != 1:
                continue
            if strategy == "context" and (t2 == 1 or model.seq_len % t2):
                continue
            if strategy == "summa" and (t1 * t2 == 1 or model.seq_len % t2 or model.hidden % t2
                                        or model.ffn_hidden % t2):
                continue
            for pp in divisors(gpus // (t1 * t2)):
                dp = gpus // (t1 * t2 * pp)
                if model.layers % pp == 0 and global_batch % dp == 0:
                    rows.append((t1, t2, pp, dp))
    return np.asarray(rows, dtype=np.int64).reshape(-1, 4)


@lru_cache(maxsize=65536)
def placements(t1: int, t2: int, pp: int, dp: int, domain: int) -> tuple[tuple[int, int, int, int], ...]:
    """Every (f_t1, f_t2, f_pp, f_dp) with f_x | x and f_t1·f_t2·f_pp·f_dp = domain."""
    out = []
    for f1 in divisors(math.gcd(t1, domain)):
        for f2 in divisors(math.gcd(t2, domain // f1)):
            for fp in divisors(math.gcd(pp, domain // (f1 * f2))):
                fd = domain // (f1 * f2 * fp)
                if dp % fd == 0:
                    out.append((f1, f2, fp, fd))
    return tuple(out)


def recompute_options(fw: Framework) -> tuple[int, ...]:
    """Selective recomputation only differs from none when attention keeps its s×s matrices (unfused)."""
    names = ("none", "full") if fw.flash_attention else RECOMPUTE
    return tuple(RECOMPUTE.index(n) for n in names)


def _panels(model: Transformer, strategy: str, t1: int, t2: int) -> list[int]:
    if strategy != "summa":
        return [1]
    base = math.lcm(t1, t2)
    return [base * k for k in PANEL_MULTIPLES if model.hidden % (base * k) == 0 and model.ffn_hidden % (base * k) == 0]


def size(model: Transformer, strategy: str, row: np.ndarray, global_batch: int, domain: int, fw: Framework) -> int:
    """Candidates one structure row expands to."""
    t1, t2, pp, dp = (int(x) for x in row)
    dists = 2 if dp * (t2 if strategy == "context" else 1) > 1 else 1
    return (len(divisors(global_batch // dp)) * len(_panels(model, strategy, t1, t2)) * len(recompute_options(fw))
            * dists * len(placements(t1, t2, pp, dp, domain)))


def expand(model: Transformer, strategy: str, rows: np.ndarray, global_batch: int, domain: int,
           fw: Framework) -> Candidates:
    """All candidates of the given structure rows."""
    columns: dict[str, list[np.ndarray]] = {k: [] for k in ("t1", "t2", "pp", "dp", "mb", "panels", "recompute",
                                                            "dist_opt", "f_t1", "f_t2", "f_pp", "f_dp")}
    rec = recompute_options(fw)
    for row in rows:
        t1, t2, pp, dp = (int(x) for x in row)
        dists = (0, 1) if dp * (t2 if strategy == "context" else 1) > 1 else (0,)
        place = np.asarray(placements(t1, t2, pp, dp, domain), dtype=np.int64)
        grid = np.asarray(list(itertools.product(divisors(global_batch // dp), _panels(model, strategy, t1, t2),
                                                 rec, dists, range(len(place)))), dtype=np.int64)
        k = len(grid)
        for name, value in (("t1", t1), ("t2", t2), ("pp", pp), ("dp", dp)):
            columns[name].append(np.full(k, value, dtype=np.int64))
        for i, name in enumerate(("mb", "panels", "recompute", "dist_opt")):
            columns[name].append(grid[:, i])
        for i, name in enumerate(("f_t1", "f_t2", "f_pp", "f_dp")):
            columns[name].append(place[grid[:, 4], i])
    if not columns["t1"]:
        return Candidates.from_columns(strategy, t1=np.zeros(0, dtype=np.int64), pp=[], dp=[], mb=[], nmb=[])
    values = {k: np.concatenate(v) for k, v in columns.items()}
    values["nmb"] = global_batch // (values["dp"] * values["mb"])
    return Candidates(strategy, **values)


def domain_size(gpus: int, nvlink_domain: int) -> int:
    """GPUs per NVLink domain actually used: the largest common divisor of the GPU count and the domain size."""
    if gpus < 1:
        raise PmdbError(f"--gpus must be at least 1, not {gpus}")
    return math.gcd(gpus, nvlink_domain)
