"""Multi-rank launch: one process per rank, a free port per launch, failures propagated to the parent.

``launch(target, world_size, payload)`` runs ``target(rank, world_size, payload)`` in every rank (a module-level
function; the process group is the target's business: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE are set for it)
and returns the ranks' results in rank order. A rank leaves with ``os._exit`` right after handing over its result:
no interpreter teardown (see ``_rank_main``).

Ranks are forked from a fork server that has torch and FBGEMM imported (a rank starts in ~0.1 s instead of the
several seconds a fresh interpreter needs to import torch). The fork server is a fresh interpreter started once per
parent process, with ``start_env`` in its environment: variables read at process start (glibc's MALLOC_*) take
effect in every rank forked from it, so a rank should record what its environment holds rather than trust what was
asked. Per-launch variables (``rank_env``) are set by each rank itself.

If a rank raises, the parent stops the others (they may be blocked in a collective) and raises :class:`RankFailed`
with that rank's error; when several ranks fail, the earliest failure is reported (the others are usually its
consequence: peers see the closed connection). A rank that dies without a word (killed, segfault) is reported with
its exit code and the tail of its log.
"""
from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import queue as queue_mod
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from tqdm import tqdm

from pmdb.errors import PmdbError

# Imported once by the fork server instead of in every rank (torch._dynamo: the first optimizer construction imports
# it, ~2.5 s; transformers' modeling code ~5 s).
PRELOAD = ["torch", "torch._dynamo", "fbgemm_gpu", "transformers.modeling_utils",
           "transformers.models.auto.modeling_auto", "collectors.workloads.worker", "collectors.workloads.dlrm",
           "collectors.workloads.dlrm_data", "collectors.workloads.transformer"]
POLL_S = 0.2
GRACE_S = 1.0  # after a first failure, how long to wait for earlier-stamped ones
_counter: Any = None  # in a rank: the launch's shared progress counter (see tick)


class RankFailed(PmdbError):
    """A rank raised or died; ``details`` holds its traceback or log tail."""

    def __init__(self, rank: int, message: str, details: str = ""):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message
        self.details = details


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """os.environ with ``values`` set (spawned children copy it at start), restored afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()[:500]


def tick(count: int = 1) -> None:
    """From a rank: advance the parent's progress bar by ``count`` (no-op outside a launch)."""
    if _counter is not None:
        with _counter.get_lock():
            _counter.value += count


def _rank_main(target: Callable[[int, int, Any], Any], rank: int, world_size: int, payload: Any,
               results: Any, log_path: str | None, rank_env: Mapping[str, str], counter: Any) -> None:
    global _counter
    _counter = counter
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    os.environ.update(rank_env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    code = 0
    try:
        results.put((rank, True, target(rank, world_size, payload)))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        results.put((rank, False, (time.time(), _one_line(exc), traceback.format_exc())))
        code = 1
    # Leave without interpreter teardown: destroying a gloo process group while its worker thread still releases
    # a Python-owned tensor deadlocks on the GIL (seen with DDP + all_to_all). Targets keep their objects alive.
    results.close()
    results.join_thread()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


def _log_tail(log_path: Path | None, lines: int = 20) -> str:
    if log_path is None or not log_path.is_file():
        return ""
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])


def launch(target: Callable[[int, int, Any], Any], world_size: int, payload: Any, *,
           start_env: Mapping[str, str] | None = None, rank_env: Mapping[str, str] | None = None,
           log_dir: Path | None = None, timeout_s: float | None = None,
           start_method: str = "forkserver", progress: tuple[str, int] | None = None) -> list[Any]:
    """Run ``target`` on ``world_size`` ranks; their results in rank order, or :class:`RankFailed`.

    ``progress`` = (label, total): a tqdm bar (on a terminal) advanced by the ranks' :func:`tick` calls."""
    if world_size < 1:
        raise PmdbError(f"bad world size {world_size}: must be >= 1")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    results = ctx.Queue()
    logs = [Path(log_dir) / f"rank{r}.log" if log_dir else None for r in range(world_size)]
    per_rank = {**(rank_env or {}), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    counter = ctx.Value("q", 0)
    procs = [ctx.Process(target=_rank_main, name=f"pmdb-rank{r}", daemon=True,
                         args=(target, r, world_size, payload, results, str(logs[r]) if logs[r] else None,
                               per_rank, counter))
             for r in range(world_size)]
    bar = tqdm(total=progress[1], desc=progress[0], unit="it", disable=None) if progress else None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    done: dict[int, Any] = {}
    failures: list[tuple[float, int, str, str]] = []
    try:
        with _environ(start_env or {}):
            for proc in procs:
                proc.start()
        while len(done) < world_size and not failures:
            _collect(results, done, failures, POLL_S)
            if bar is not None:
                bar.update(counter.value - bar.n)
            if failures:
                break
            for rank, proc in enumerate(procs):
                if rank not in done and not proc.is_alive():
                    _collect(results, done, failures, POLL_S)  # a result may still be in flight
                    if rank not in done and not any(f[1] == rank for f in failures):
                        code = proc.exitcode
                        why = f"killed by signal {-code}" if code and code < 0 else f"exited with code {code}"
                        failures.append((time.time(), rank, f"the process {why} without a result",
                                         _log_tail(logs[rank])))
            if deadline is not None and time.monotonic() > deadline and not failures:
                missing = [r for r in range(world_size) if r not in done]
                failures.append((time.time(), missing[0], f"timed out after {timeout_s:.0f} s", ""))
        if failures:
            end = time.monotonic() + GRACE_S
            while time.monotonic() < end and len(done) + len(failures) < world_size:
                _collect(results, done, failures, POLL_S)
            _, rank, message, details = min(failures)
            raise RankFailed(rank, message, details)
    finally:
        if bar is not None:
            bar.close()
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join(5)
        results.close()
    return [done[r] for r in range(world_size)]


def _collect(results: Any, done: dict[int, Any], failures: list[tuple[float, int, str, str]], wait_s: float) -> None:
    """Move every message waiting (up to ``wait_s`` for the first) into ``done`` / ``failures``."""
    try:
        rank, ok, value = results.get(timeout=wait_s)
    except queue_mod.Empty:
        return
    while True:
        if ok:
            done[rank] = value
        else:
            stamp, message, details = value
            failures.append((stamp, rank, message, details))
        try:
            rank, ok, value = results.get_nowait()
        except queue_mod.Empty:
            return
