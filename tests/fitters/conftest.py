"""Synthetic data with KNOWN timing laws, written to a real store (a workspace whose MLflow store exists:
``fit_workspace`` of tests/conftest.py).

Kernel law (µs): t = T0 + max(2·B·M·N·K / FLOPS, 4·(B·M·K + B·K·N + B·M·N) / BW) · 1e6, times a seeded log-normal
noise factor. Embedding law (µs): t = 10 + Σ_tables B·L·D·(1 + 3·rf0) / 2000 (rf0 = share of indices looked up
once). Collective law: :meth:`fitters.collective.CollectiveParams.continuous` with chosen parameters.
"""
from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import numpy as np
import pytest

from fitters.collective import CollectiveParams, bus_factor, curve
from harness import cli  # noqa: F401  (the fitters' tests import it from here)
from pmdb import platform as platforms

PLATFORM = "synthetic-cpu"
T0, FLOPS, BW = 8.0, 4e10, 8e9


def _key(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def gemm_law(params: dict) -> float:
    b, m, n, k = (params.get(c, 1) for c in ("B", "M", "N", "K"))
    return T0 + max(2 * b * m * n * k / FLOPS, 4 * (b * m * k + b * k * n + b * m * n) / BW) * 1e6


def gemm_configs(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    sizes = [16, 32, 64, 128, 256, 512, 1024, 2048]
    seen, out = set(), []
    while len(out) < n:
        cfg = {"B": 1, "M": int(rng.choice([1, 4, 16, 64, 256, 1024, 4096])), "N": int(rng.choice(sizes)),
               "K": int(rng.choice(sizes))}
        if tuple(cfg.values()) not in seen:
            seen.add(tuple(cfg.values()))
            out.append(cfg)
    return out


def insert_ops(store, op: str, configs: list[dict], times: list[float], *, pass_: str = "fwd",
               cache_state: str = "cold", implementation: str = "torch", stats: list[list[dict]] | None = None,
               platform: str = PLATFORM) -> str:
    """One completed 'ops' run with these measurements (and embedding statistics). Returns the run id."""
    platforms.ensure_named(store, platform, device_kind="cpu")
    with store.run("ops", platform, {"synthetic": op}) as run:
        for i, (cfg, t) in enumerate(zip(configs, times)):
            mid = store.insert_one("op_measurements", {
                "run_id": run.run_id, "platform": platform, "op": op, "pass": pass_,
                "implementation": implementation, "dtype": "float32", "device": "cpu", "cache_state": cache_state,
                "params": cfg, "config_key": _key(op, pass_, implementation, cfg), "median_us": t,
                "threads": 1}, returning="measurement_id")
            for table in (stats[i] if stats else []):
                store.insert_one("embedding_batch_stats", {**table, "run_id": run.run_id, "measurement_id": mid})
    return run.run_id


def insert_peaks(store, platform: str = PLATFORM) -> None:
    platforms.ensure_named(store, platform, device_kind="cpu")
    with store.run("peaks", platform) as run:
        store.insert("platform_peaks", [
            {"platform": platform, "run_id": run.run_id, "metric": "gemm_flops", "dtype": "float32", "value": FLOPS},
            {"platform": platform, "run_id": run.run_id, "metric": "mem_bw", "dtype": "float32", "value": BW}])


def noisy(values, sigma: float, seed: int) -> np.ndarray:
    return np.asarray(values, dtype=float) * np.exp(np.random.default_rng(seed).normal(0, sigma, len(values)))


def embedding_data(n: int, seed: int = 0) -> tuple[list[dict], list[list[dict]], list[float]]:
    """(params, per-table statistics, exact times) of ``n`` synthetic batched lookups."""
    rng = np.random.default_rng(seed)
    configs, stats, times = [], [], []
    for _ in range(n):
        tables = int(rng.integers(1, 5))
        batch = int(rng.choice([64, 128, 256, 512]))
        rows = [int(np.exp(rng.uniform(np.log(1e3), np.log(1e6)))) for _ in range(tables)]
        dims = [int(rng.choice([8, 16, 32, 64])) for _ in range(tables)]
        pooling = [float(rng.uniform(1, 60)) for _ in range(tables)]
        table_stats, total = [], 10.0
        for t in range(tables):
            rf = rng.dirichlet(np.ones(4))
            reuse = np.concatenate([rf, np.zeros(13)])
            table_stats.append({"table_index": t, "batch_size": batch, "num_rows": rows[t], "dim": dims[t],
                                "pooling_mean": pooling[t], "reuse_factors": reuse.tolist()})
            total += batch * pooling[t] * dims[t] * (1 + 3 * reuse[0]) / 2000
        configs.append({"B": batch, "T": tables, "E": rows, "D": dims, "L": pooling})
        stats.append(table_stats)
        times.append(total)
    return configs, stats, times


COLLECTIVE_TRUTH = dict(m1=2.0 ** 14, m2=2.0 ** 23, t_s=60.0, bw_max=1.5, k=0.9, x0=18.5)


def collective_truth(collective: str = "all_reduce", world_size: int = 2) -> CollectiveParams:
    return CollectiveParams.continuous(**COLLECTIVE_TRUTH, mul=bus_factor(collective, world_size))


def insert_collectives(store, collective: str, world_size: int, sizes, times, *, split_kind: str = "equal",
                       platform: str = PLATFORM, backend: str = "gloo") -> str:
    platforms.ensure_named(store, platform, device_kind="cpu")
    with store.run("comms", platform) as run:
        store.insert("collective_measurements", [
            {"run_id": run.run_id, "platform": platform, "collective": collective, "backend": backend,
             "world_size": world_size, "split_kind": split_kind, "rank": None, "total_bytes": int(s) * world_size,
             "max_rank_bytes": int(s), "lat_p50_us": float(t), "source": "measured"}
            for s, t in zip(sizes, times)])
    return run.run_id


def collective_points(world_size: int = 2, sigma: float = 0.0, seed: int = 0,
                      collective: str = "all_reduce") -> tuple[np.ndarray, np.ndarray]:
    sizes = 2.0 ** np.arange(2, 27)
    times = curve(collective_truth(collective, world_size), bus_factor(collective, world_size), sizes)
    return sizes, noisy(times, sigma, seed) if sigma else times


@pytest.fixture(scope="session")
def synthetic() -> SimpleNamespace:
    """The synthetic-data helpers of this module."""
    return SimpleNamespace(PLATFORM=PLATFORM, T0=T0, FLOPS=FLOPS, BW=BW, gemm_law=gemm_law,
                           gemm_configs=gemm_configs, insert_ops=insert_ops, insert_peaks=insert_peaks, noisy=noisy,
                           embedding_data=embedding_data, collective_truth=collective_truth,
                           insert_collectives=insert_collectives, collective_points=collective_points,
                           COLLECTIVE_TRUTH=COLLECTIVE_TRUTH)


def one_line_error(result: tuple[int, str, str], pattern: str) -> None:
    """A refused command: exit 2, one line ``pmdb: error: ...`` matching ``pattern``, no traceback."""
    import re

    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("pmdb: error: ") and re.search(pattern, lines[0]), err
