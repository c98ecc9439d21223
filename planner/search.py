"""Search the parallel configurations for the fastest that fit: chunks of candidates evaluated as numpy arrays,
in this process or in ``workers`` processes, with a progress bar; the top K feasible configurations are kept."""
from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from tqdm import tqdm

from pmdb.errors import PmdbError
from planner import space
from planner.candidates import STRATEGIES, Candidates, Framework
from planner.evaluate import BREAKDOWN_KEYS, Evaluation, evaluate
from planner.model import Transformer
from planner.system import System

CHUNK = 100_000   # candidates per numpy evaluation (~0.5 GB of temporaries at most)


@dataclass
class SearchResult:
    """The top configurations (fastest first) and what the search did."""

    top: pd.DataFrame
    evaluated: int
    feasible: int
    elapsed_s: float
    min_memory_bytes: float
    usage: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        """Configurations evaluated per second."""
        return self.evaluated / self.elapsed_s if self.elapsed_s > 0 else float("nan")


def rows_of(c: Candidates, model: Transformer, global_batch: int, result: Evaluation, index: np.ndarray
            ) -> pd.DataFrame:
    """A frame of the chosen candidates with time, throughput, memory and the breakdown (seconds)."""
    sub = c.take(index)
    frame = sub.frame()
    frame["time_s"] = result.time[index]
    frame["samples_per_s"] = global_batch / result.time[index]
    frame["tokens_per_s"] = frame["samples_per_s"] * model.seq_len
    frame["memory_gb"] = result.memory["total"][index] / 1e9
    for key in BREAKDOWN_KEYS:
        frame[key] = result.parts[key][index]
    for key in ("weights", "gradients", "optimizer", "activations"):
        frame[f"mem_{key}_gb"] = result.memory[key][index] / 1e9
    return frame


def _evaluate_chunk(args: tuple) -> tuple[pd.DataFrame, int, int, float, dict]:
    model, system, fw, calibration, strategy, rows, global_batch, domain, top = args
    cands = space.expand(model, strategy, rows, global_batch, domain, fw)
    if len(cands) == 0:
        return pd.DataFrame(), 0, 0, float("inf"), {}
    result = evaluate(model, system, cands, fw, calibration)
    feasible = np.flatnonzero(result.fits)
    best = feasible[np.argsort(result.time[feasible], kind="stable")[:top]]
    return (rows_of(cands, model, global_batch, result, best), len(cands), len(feasible),
            float(result.memory["total"].min()), result.usage)


def _tasks(model: Transformer, system: System, fw: Framework, calibration, strategies: list[str], gpus: int,
           global_batch: int, top: int, chunk: int) -> tuple[list[tuple], list[int]]:
    domain = space.domain_size(gpus, system.nvlink_domain)
    tasks, sizes = [], []
    for strategy in strategies:
        rows = space.structures(model, strategy, gpus, global_batch)
        counts = [space.size(model, strategy, r, global_batch, domain, fw) for r in rows]
        start, acc = 0, 0
        for i, n in enumerate(counts):
            acc += n
            if acc >= chunk or i == len(counts) - 1:
                tasks.append((model, system, fw, calibration, strategy, rows[start:i + 1], global_batch, domain, top))
                sizes.append(acc)
                start, acc = i + 1, 0
    return tasks, sizes


def has_candidates(model: Transformer, strategy: str, gpus: int, global_batch: int) -> bool:
    """Whether any configuration of the strategy ('all' for any) divides the GPUs, the model and the batch."""
    strategies = list(STRATEGIES) if strategy == "all" else [strategy]
    return any(len(space.structures(model, s, gpus, global_batch)) for s in strategies)


def search(model: Transformer, system: System, gpus: int, global_batch: int, *, strategy: str = "1d",
           fw: Framework, top: int = 10, workers: int = 1, calibration: object | None = None,
           progress: bool = True, chunk: int = CHUNK) -> SearchResult:
    """Evaluate every candidate of ``strategy`` ('1d', 'summa', 'context' or 'all') and keep the ``top`` fastest
    that fit in memory."""
    strategies = list(STRATEGIES) if strategy == "all" else [strategy]
    if strategy != "all" and strategy not in STRATEGIES:
        raise PmdbError(f"unknown strategy {strategy!r}: use 1d, summa, context or all")
    if global_batch < 1 or top < 1 or workers < 1:
        raise PmdbError("--global-batch, --top and --workers must be at least 1")
    started = time.perf_counter()
    tasks, sizes = _tasks(model, system, fw, calibration, strategies, gpus, global_batch, top, chunk)
    frames, evaluated, feasible, min_memory, usage = [], 0, 0, float("inf"), {}
    bar = tqdm(total=sum(sizes), unit="cfg", unit_scale=True, disable=not progress, desc=f"plan {strategy}",
               leave=False)
    with bar:
        if workers > 1 and len(tasks) > 1:
            # the platform's default start method (fork on Linux: the workers inherit the imports, ~10 ms to start)
            with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context()) as pool:
                outputs = pool.map(_evaluate_chunk, tasks)
                for out, n in zip(outputs, sizes):
                    frames, evaluated, feasible, min_memory = _merge(out, frames, evaluated, feasible, min_memory,
                                                                     usage, top)
                    bar.update(n)
        else:
            for task, n in zip(tasks, sizes):
                frames, evaluated, feasible, min_memory = _merge(_evaluate_chunk(task), frames, evaluated, feasible,
                                                                 min_memory, usage, top)
                bar.update(n)
    top_frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if not top_frame.empty:
        top_frame = top_frame.sort_values("time_s", kind="stable").head(top).reset_index(drop=True)
        top_frame.insert(0, "rank", np.arange(1, len(top_frame) + 1))
    return SearchResult(top_frame, evaluated, feasible, time.perf_counter() - started, min_memory, usage)


def _merge(out: tuple, frames: list[pd.DataFrame], evaluated: int, feasible: int, min_memory: float,
           usage: dict, top: int) -> tuple[list[pd.DataFrame], int, int, float]:
    frame, n, ok, memory, used = out
    for kind, counts in used.items():
        for source, k in counts.items():
            usage.setdefault(kind, {})[source] = usage.get(kind, {}).get(source, 0) + k
    if not frame.empty:
        frames = [pd.concat([*frames, frame], ignore_index=True).sort_values("time_s", kind="stable").head(top)]
    return frames, evaluated + n, feasible + ok, min(min_memory, memory)
