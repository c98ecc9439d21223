"""A collective sweep end to end: plan the steps, run the ranks, turn rank 0's latency matrices into
``collective_measurements`` rows and write them in one transaction inside a 'comms' collection run.

Only the parent (spawn) or rank 0 (torchrun) touches the store; a failure anywhere leaves the run 'failed'
with no rows written.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from collectors.comms import sweep_ranks
from collectors.comms.bus import from_buffers
from collectors.comms.config import SweepConfig, TorchrunEnv, is_oversubscribed, usable_cores
from collectors.comms.store_rows import TABLE, latency_stats, make_row, write_atomic
from collectors.comms.sizes import COLLECTIVES, Step
from collectors.comms.worker import LoopSettings, RankContext, Reporter, run_steps
from pmdb.errors import PmdbError
from pmdb.store import Store

@dataclass
class SweepOutcome:
    """What a finished sweep wrote and how long it took."""

    run_id: str
    rows: pd.DataFrame              # the rows written, plus nominal_bytes (the ladder size of their step)
    wall_s: float
    steps: int
    oversubscribed: bool
    summary: dict[str, Any] = field(default_factory=dict)


def _rank_main(ctx: RankContext, report: Reporter | None, payload: tuple[list[Step], LoopSettings]) -> None:
    steps, settings = payload
    run_steps(ctx, steps, settings, report)


def _measure(config: SweepConfig, steps: list[Step], on_step: sweep_ranks.OnStep | None,
             env: TorchrunEnv | None) -> None:
    payload = (steps, LoopSettings(config.iters, config.warmup, config.dtype))
    if env is not None:
        sweep_ranks.run_inline(_rank_main, env, payload, threads=config.threads, on_step=on_step,
                          timeout_s=config.timeout_s)
    else:
        sweep_ranks.spawn(_rank_main, config.world_size, payload, threads=config.threads,
                     on_step=on_step or (lambda *_: None), timeout_s=config.timeout_s)


def step_rows(step: Step, matrix: np.ndarray, *, run_id: str, platform: str, backend: str,
              config: SweepConfig) -> list[dict[str, Any]]:
    """Rows of one step: one per rank, then the aggregate (per iteration the slowest rank; rank NULL)."""
    elem = config.element_bytes
    sizes = from_buffers([e * elem for e in step.in_elems], [e * elem for e in step.out_elems])
    common = dict(run_id=run_id, platform=platform, collective=step.collective, backend=backend,
                  world_size=step.world_size, sizes=sizes, split_kind=step.split_kind, source="measured",
                  dtype=config.dtype, in_place=step.collective == "all_reduce", iterations=config.iters,
                  warmup=config.warmup, threads_per_rank=config.threads)
    rows = [make_row(rank=r, latency=latency_stats(matrix[r]), **common) for r in range(matrix.shape[0])]
    rows.append(make_row(rank=None, latency=latency_stats(matrix.max(axis=0)), **common))
    return rows


def format_bytes(size: float) -> str:
    """4 -> '4 B', 65536 -> '64 KiB' (powers of 1024)."""
    if size < 1024:
        return f"{size:g} B"
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.4g} {unit}"


def curve_table(rows: pd.DataFrame) -> pd.DataFrame:
    """The latency curve of a sweep, for printing: per nominal message size, the p50 latency (µs) and busbw
    (GB/s) of every collective from the aggregated rows (all_to_allv: median over its random draws)."""
    agg = rows[rows["rank"].isna()]
    if agg.empty:
        return pd.DataFrame()
    grouped = agg.groupby(["nominal_bytes", "collective"])[["lat_p50_us", "busbw_gbps"]].median()
    sizes = sorted(agg["nominal_bytes"].unique())
    out = pd.DataFrame({"size": [format_bytes(s) for s in sizes]})
    for collective in [c for c in COLLECTIVES if c in set(agg["collective"])]:
        part = grouped.xs(collective, level="collective").reindex(sizes)
        out[f"{collective} us"] = [f"{v:.1f}" if pd.notna(v) else "" for v in part["lat_p50_us"]]
        out[f"{collective} GB/s"] = [f"{v:.3g}" if pd.notna(v) else "" for v in part["busbw_gbps"]]
    return out


def run_sweep(store: Store, config: SweepConfig, platform: str, *, progress: bool = True,
              env: TorchrunEnv | None = None) -> SweepOutcome:
    """Measure ``config`` on this host (spawned ranks) or as rank 0 of a torchrun job (``env``) and store it."""
    if env is not None and env.rank != 0:
        raise PmdbError("only rank 0 writes to the store; other ranks run follow()")
    steps = config.plan()
    backend, device_kind = sweep_ranks.backend_for_device()
    if env is None and device_kind == "cuda":
        import torch
        if config.world_size > torch.cuda.device_count():
            raise PmdbError(f"world size {config.world_size} needs one GPU per rank; "
                            f"{torch.cuda.device_count()} visible (use torchrun across hosts)")
    oversubscribed = is_oversubscribed(config, device_kind, env)
    matrices: dict[int, np.ndarray] = {}
    with store.run("comms", platform, {**config.args(), "backend": backend,
                                       "launcher": "torchrun" if env else "spawn"}) as run:
        bar = tqdm(total=len(steps), desc="comms", unit="size", disable=not progress)

        def on_step(index: int, matrix: np.ndarray) -> None:
            matrices[index] = matrix
            step = steps[index]
            size = max(max(step.in_elems), max(step.out_elems)) * config.element_bytes
            bar.set_postfix_str(f"{step.collective} {format_bytes(size)}")
            bar.update(1)

        began = time.perf_counter()
        try:
            _measure(config, steps, on_step, env)
        finally:
            bar.close()
        wall_s = time.perf_counter() - began
        if len(matrices) != len(steps):
            raise RuntimeError(f"the ranks reported {len(matrices)} of {len(steps)} steps")
        rows: list[dict[str, Any]] = []
        for index, step in enumerate(steps):
            rows.extend(step_rows(step, matrices[index], run_id=run.run_id, platform=platform, backend=backend,
                                  config=config))
        write_atomic(store, [(TABLE, rows)])
        run.summary = {"steps": len(steps), "rows": len(rows), "wall_s": round(wall_s, 2), "backend": backend,
                       "world_size": config.world_size, "threads_per_rank": config.threads,
                       "cores": usable_cores(), "oversubscribed": oversubscribed}
    frame = pd.DataFrame(rows)
    ladder = config.sizes()
    frame["nominal_bytes"] = [ladder[s.size_index] for s in steps for _ in range(config.world_size + 1)]
    return SweepOutcome(run.run_id, frame, wall_s, len(steps), oversubscribed, run.summary)


def follow(config: SweepConfig, env: TorchrunEnv) -> None:
    """A torchrun rank other than 0: measure with the others, store nothing."""
    _measure(config, config.plan(), None, env)
