"""The per-rank benchmark loop, device-generic: CUDA events on GPU (nccl), ``perf_counter_ns`` on CPU (gloo).

Every timed iteration is bracketed by a barrier so the ranks start together; latencies are µs. The first warm-up
call of every step checks the collective's result, so a wrong answer fails the rank instead of being timed.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from collectors.comms.sizes import Step

DTYPES = {"float32": torch.float32}

# (step index, latencies in µs with shape [world_size, iters]) -> None; called on rank 0 only.
Reporter = Callable[[int, np.ndarray], None]


@dataclass(frozen=True)
class RankContext:
    """Where this rank runs: its rank, the world, its device and the process-group backend."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str


@dataclass(frozen=True)
class LoopSettings:
    """Timed iterations and untimed warm-up calls (at least one: it validates the result) per step."""

    iters: int
    warmup: int
    dtype: str = "float32"


def _all_gather(out: torch.Tensor, inp: torch.Tensor) -> None:
    (getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor)(out, inp)


def _reduce_scatter(out: torch.Tensor, inp: torch.Tensor) -> None:
    (getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor)(out, inp)


def _prepare(ctx: RankContext, step: Step, dtype: torch.dtype) -> tuple[Callable[[], None], torch.Tensor, torch.Tensor]:
    """Allocate this rank's buffers and return (call, input, output)."""
    r = ctx.rank
    inp = torch.empty(step.in_elems[r], dtype=dtype, device=ctx.device)
    if step.collective == "all_reduce":
        return (lambda: dist.all_reduce(inp)), inp, inp
    out = torch.empty(step.out_elems[r], dtype=dtype, device=ctx.device)
    if step.collective == "all_gather":
        return (lambda: _all_gather(out, inp)), inp, out
    if step.collective == "reduce_scatter":
        return (lambda: _reduce_scatter(out, inp)), inp, out
    if step.splits is None:  # all_to_all, equal chunks
        return (lambda: dist.all_to_all_single(out, inp)), inp, out
    send = list(step.splits[r])
    recv = [row[r] for row in step.splits]
    return (lambda: dist.all_to_all_single(out, inp, output_split_sizes=recv, input_split_sizes=send)), inp, out


def _expected(ctx: RankContext, step: Step, dtype: torch.dtype) -> torch.Tensor:
    """What this rank's output must hold when every rank r filled its input with r + 1."""
    n, r = ctx.world_size, ctx.rank
    if step.collective in ("all_reduce", "reduce_scatter"):
        return torch.full((step.out_elems[r],), n * (n + 1) / 2, dtype=dtype)
    if step.splits is not None:
        counts = [row[r] for row in step.splits]
    else:
        counts = [step.out_elems[r] // n] * n
    return torch.repeat_interleave(torch.arange(1, n + 1, dtype=dtype), torch.tensor(counts))


def _barrier(ctx: RankContext) -> None:
    if ctx.device.type == "cuda":
        dist.barrier(device_ids=[ctx.device.index])
    else:
        dist.barrier()


def time_call_us(ctx: RankContext, call: Callable[[], None]) -> float:
    """Wall time of one call in µs (CUDA events on a GPU, perf_counter_ns on the host)."""
    if ctx.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e3  # ms -> µs
    begin = time.perf_counter_ns()
    call()
    return (time.perf_counter_ns() - begin) / 1e3


def measure_step(ctx: RankContext, step: Step, settings: LoopSettings) -> np.ndarray:
    """This rank's latencies (µs) over ``settings.iters`` barrier-bracketed iterations of ``step``."""
    dtype = DTYPES[settings.dtype]
    call, inp, out = _prepare(ctx, step, dtype)
    inp.fill_(ctx.rank + 1)
    call()
    if not torch.equal(out.cpu(), _expected(ctx, step, dtype)):
        raise RuntimeError(f"rank {ctx.rank}: {step.collective} with {step.in_elems[ctx.rank]} input elements "
                           f"returned wrong values (validation failed)")
    inp.zero_()  # in-place all_reduce keeps summing: zeros cannot overflow
    for _ in range(settings.warmup - 1):
        call()
    latencies = np.empty(settings.iters)
    for i in range(settings.iters):
        _barrier(ctx)
        latencies[i] = time_call_us(ctx, call)
    return latencies


def gather_latencies(ctx: RankContext, latencies: np.ndarray) -> np.ndarray:
    """All ranks' latencies as a [world_size, iters] array (every rank receives it)."""
    mine = torch.as_tensor(latencies, dtype=torch.float64, device=ctx.device)
    every = torch.empty(ctx.world_size * mine.numel(), dtype=torch.float64, device=ctx.device)
    _all_gather(every, mine)
    return every.cpu().numpy().reshape(ctx.world_size, -1)


def run_steps(ctx: RankContext, steps: list[Step], settings: LoopSettings, report: Reporter | None = None) -> None:
    """Measure every step in order; rank 0 hands each step's latency matrix to ``report``."""
    for index, step in enumerate(steps):
        matrix = gather_latencies(ctx, measure_step(ctx, step, settings))
        if ctx.rank == 0 and report is not None:
            report(index, matrix)
