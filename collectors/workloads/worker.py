"""What each rank runs: build the workload, time it (ground truth), then record the two profiled passes.

Batch numbering: batches 0..W-1 are the warm-up, W..W+N-1 the timed iterations 0..N-1. The profiled passes replay
timed iterations 0..P-1 (after up to two warm-up batches), so trace iteration n, ground-truth iteration n-1 and the
embedding statistics of iteration n-1 describe the same inputs.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from collectors.workloads.allocator import RECORDED
from collectors.workloads.trainers import make_trainer
from collectors.workloads.dlrm_presets import DlrmConfig
from collectors.workloads.transformer_shape import TransformerConfig

FAMILIES = ("dlrm", "transformer")
_KEEP: list[Any] = []  # trainers outlive run_rank: the rank process exits without freeing them


@dataclass(frozen=True)
class WorkloadJob:
    """Everything a rank needs (picklable). ``plan`` is the DLRM table placement; ``trace_iters`` 0 = no traces."""

    family: str
    config: DlrmConfig | TransformerConfig
    batch_size: int
    world_size: int
    seed: int
    iters: int
    warmup: int
    threads: int
    plan: tuple[int, ...] | None = None
    trace_iters: int = 0
    trace_dir: str | None = None
    device: str = "cpu"

    @property
    def warmup_ids(self) -> list[int]:
        return list(range(self.warmup))

    @property
    def timed_ids(self) -> list[int]:
        return list(range(self.warmup, self.warmup + self.iters))

    @property
    def trace_ids(self) -> list[int]:
        return self.timed_ids[:self.trace_iters]

    @property
    def trace_warmup_ids(self) -> list[int]:
        return self.warmup_ids[-2:] or self.timed_ids[:1]

    @property
    def total_steps(self) -> int:
        """Training steps rank 0 runs: ground truth, then (with traces) the two passes with their warm-ups."""
        passes = 2 * (len(self.trace_warmup_ids) + len(self.trace_ids)) if self.trace_iters else 0
        return self.warmup + self.iters + passes


def one_thread(probe: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``probe()`` on one intra-op thread, as ``collect ops`` measures (the rank's thread count set back after)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return probe()
    finally:
        torch.set_num_threads(threads)


def run_rank(rank: int, world_size: int, job: WorkloadJob) -> dict[str, Any]:
    """The rank program (runner target): ground truth, then the Kineto-only and ET passes. Returns per-rank times
    (µs), embedding statistics (DLRM), the zero shares of the optimizer state at the start and the end of the timed
    iterations, trace paths and facts about the run."""
    import torch
    import torch.distributed as dist

    from collectors.launch import tick
    from collectors.memory_probe import read_probe
    from collectors.wake_probe import read_wake
    from collectors.workloads.ground_truth import time_iterations
    from collectors.workloads.optimizer_state import state_zero_fractions
    from collectors.workloads.profile import et_pass, kineto_pass

    started = time.perf_counter()
    torch.set_num_threads(job.threads)
    cuda = job.device == "cuda"
    local = int(os.environ.get("LOCAL_RANK", rank))   # a torchrun job: this host's GPU of the rank
    device = torch.device(f"cuda:{local}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    if world_size > 1 and not dist.is_initialized():   # a torchrun job's rank joined it already
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world_size)
    trainer = make_trainer(job.family, job.config, device, rank=rank, world_size=job.world_size, seed=job.seed,
                           plan=job.plan, batch_size=job.batch_size)
    trainer.prepare(sorted(set(job.warmup_ids + job.timed_ids)))
    sync = torch.cuda.synchronize if cuda else None

    def before() -> None:
        """Before every iteration, outside the timed and the marked interval: progress, then the barrier."""
        if rank == 0:
            tick()
        if world_size > 1:
            dist.barrier()

    step = trainer.step
    built = time.perf_counter()
    # the host's memory pace and the LLC it finds, before the warm-up re-warms the caches; then its compute pace
    # (simulator.compute_phase)
    probes = [read_probe(curve=True, decay=True)] if rank == 0 else []
    wakes = [one_thread(read_wake)] if rank == 0 else []
    time_iterations(step, job.warmup_ids, [], before, sync)
    optimizer = getattr(trainer, "optimizer", None)
    state = state_zero_fractions(optimizer, job.warmup)   # between iterations: outside every timed interval
    times = time_iterations(step, [], job.timed_ids, before, sync)
    timed = time.perf_counter()
    state += state_zero_fractions(optimizer, job.warmup + job.iters)
    if rank == 0:
        probes.append(read_probe(curve=True))
        wakes.append(one_thread(read_wake))
    out: dict[str, Any] = {"rank": rank, "times_us": times, "info": trainer.info(), "threads": torch.get_num_threads(),
                           "allocator_env": {k: v for k, v in os.environ.items() if k in RECORDED},
                           "wall_s": {"build": built - started, "ground_truth": timed - built},
                           "memory_probe": probes, "wake_probe": wakes}
    stats = getattr(trainer, "stats", {})
    out["stats"] = [dict(row, iteration=i, rank=rank) for i, k in enumerate(job.timed_ids) for row in stats.get(k, [])]
    out["state_stats"] = [dict(row, rank=rank) for row in state]
    if job.trace_iters:
        folder = Path(job.trace_dir)
        out["kineto"] = str(folder / f"rank{rank}.kineto.json")
        out["et"] = str(folder / f"rank{rank}.et.json")
        out["wall_s"]["kineto_pass"] = kineto_pass(step, job.trace_warmup_ids, job.trace_ids, Path(out["kineto"]),
                                                   barrier=before, sync=sync, cuda=cuda)
        out["wall_s"]["et_pass"] = et_pass(step, job.trace_warmup_ids, job.trace_ids, Path(out["et"]),
                                           barrier=before, sync=sync)
    if world_size > 1:  # every rank is past its last collective; the runner's exit skips teardown (no destroy:
        dist.barrier()  # it can deadlock with DDP + all_to_all, see collectors.launch._rank_main)
    _KEEP.append(trainer)
    return out
