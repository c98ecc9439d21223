"""Launching ranks: spawned on this host with torch.multiprocessing, or joined from a ``torchrun`` environment.

Backend gloo on CPU, nccl on CUDA (one GPU per rank). A rank's exception reaches the parent with its message
(:class:`RankFailure`); when one rank fails, the others are stopped and nothing of the sweep counts.
"""
from __future__ import annotations

import ctypes
import os
import queue as queue_module
import signal
import socket
import time
import traceback
from datetime import timedelta
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from collectors.comms.config import DEFAULT_TIMEOUT_S, TorchrunEnv
from collectors.comms.worker import RankContext, Reporter
from pmdb.errors import PmdbError

# fn(ctx, report, payload): ``report`` is set on rank 0 only. Must be a module-level function (it is pickled).
RankFn = Callable[[RankContext, "Reporter | None", Any], None]
OnStep = Callable[[int, np.ndarray], None]


class RankFailure(PmdbError):
    """A rank failed; the message names the rank and its error (the full traceback is in ``details``)."""

    exit_code = 1

    def __init__(self, rank: int | None, message: str, details: str = ""):
        super().__init__(f"rank {rank} failed: {message}" if rank is not None else message)
        self.rank = rank
        self.details = details


def backend_for_device() -> tuple[str, str]:
    """(process-group backend, device type) of this machine: ('nccl', 'cuda') or ('gloo', 'cpu')."""
    return ("nccl", "cuda") if torch.cuda.is_available() else ("gloo", "cpu")


def free_port() -> int:
    """A TCP port that was free a moment ago on 127.0.0.1 (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def init_rank(rank: int, world_size: int, local_rank: int, timeout_s: float = DEFAULT_TIMEOUT_S) -> RankContext:
    """Join the process group (MASTER_ADDR/MASTER_PORT from the environment) and return this rank's context."""
    backend, kind = backend_for_device()
    device = torch.device("cuda", local_rank) if kind == "cuda" else torch.device("cpu")
    if kind == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s),
                            device_id=device if kind == "cuda" else None)
    return RankContext(rank=rank, world_size=world_size, local_rank=local_rank, device=device, backend=backend)


def _die_with_parent() -> None:
    """Linux: have the kernel kill this rank when its parent dies, so no rank outlives a killed sweep."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _child(index: int, fn: RankFn, world_size: int, port: int, threads: int, timeout_s: float,
           messages: Any, payload: Any) -> None:
    _die_with_parent()
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    joined = False
    try:
        torch.set_num_threads(threads)
        ctx = init_rank(index, world_size, index, timeout_s)
        joined = True
        report = (lambda step, matrix: messages.put(("step", step, matrix))) if index == 0 else None
        fn(ctx, report, payload)
    except BaseException as exc:
        # reported before the process group closes: the other ranks' connection errors come later
        messages.put(("error", index, time.time(), _one_line(exc), traceback.format_exc()))
        raise
    finally:
        if joined:
            dist.destroy_process_group()


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]


def _stop(processes: list) -> None:
    for proc in processes:
        if proc.is_alive():
            proc.terminate()
    for proc in processes:
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join(5)


def _failure(exc: Exception, errors: list[tuple], processes: list) -> RankFailure:
    """The root cause: a rank killed by a signal other than our SIGTERM (it could not report), else the first
    rank's own reported error, else what the process's exit tells."""
    for rank, proc in enumerate(processes):
        code = proc.exitcode
        if code is not None and code < 0 and -code != signal.SIGTERM and rank not in {e[1] for e in errors}:
            return RankFailure(rank, f"the process died (killed by {signal.Signals(-code).name})")
    if errors:
        _, rank, _, message, details = min(errors, key=lambda e: e[2])
        return RankFailure(rank, message, details)
    rank = getattr(exc, "error_index", None)
    if isinstance(exc, mp.ProcessExitedException):
        how = f"killed by {exc.signal_name}" if exc.signal_name else f"exited with code {exc.exit_code}"
        return RankFailure(rank, f"the process died ({how})")
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return RankFailure(rank, lines[-1] if lines else type(exc).__name__, str(exc))


def spawn(fn: RankFn, world_size: int, payload: Any, *, threads: int, on_step: OnStep,
          timeout_s: float = DEFAULT_TIMEOUT_S, poll_s: float = 0.1) -> None:
    """Run ``fn`` on ``world_size`` spawned ranks of this host; ``on_step`` receives rank 0's reports here.

    Raises :class:`RankFailure` with the first failing rank's error; no rank survives this call.
    """
    context = mp.get_context("spawn")
    messages = context.Queue()
    procs = mp.start_processes(_child, args=(fn, world_size, free_port(), threads, timeout_s, messages, payload),
                               nprocs=world_size, join=False, start_method="spawn")
    errors: list[tuple] = []

    def drain(wait_s: float = 0.0) -> None:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                message = messages.get(timeout=max(0.0, deadline - time.monotonic())) if wait_s else \
                    messages.get_nowait()
            except queue_module.Empty:
                return
            if message[0] == "step":
                on_step(message[1], message[2])
            else:
                errors.append(message)

    try:
        while True:
            drain()
            if procs.join(timeout=poll_s):
                break
        drain()
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        drain(wait_s=1.0)
        raise _failure(exc, errors, procs.processes) from None
    finally:
        _stop(procs.processes)
        messages.close()


def run_inline(fn: RankFn, env: TorchrunEnv, payload: Any, *, threads: int, on_step: OnStep | None,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
    """Play one rank of a torchrun job in this process (``on_step`` is used on rank 0)."""
    torch.set_num_threads(threads)
    ctx = init_rank(env.rank, env.world_size, env.local_rank, timeout_s)
    try:
        fn(ctx, on_step if env.rank == 0 else None, payload)
    finally:
        dist.destroy_process_group()
