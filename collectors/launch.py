"""Multi-rank launch on this host: one process per rank, a free port per launch, failures propagated to the parent.

``launch(target, world_size, payload)`` runs ``target(rank, world_size, payload)`` in every rank (a module-level
function: it is pickled; the process group is the target's business: MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK and
WORLD_SIZE are set for it) and returns the ranks' results in rank order. A rank leaves with ``os._exit`` right after
handing over its result: no interpreter teardown (see ``_rank_main``). The kernel kills a rank whose parent dies, so
no rank outlives a killed launch.

Start methods: ``spawn`` (a fresh interpreter per rank) or ``forkserver`` with ``preload`` modules imported once by
the fork server (a rank then starts in ~0.1 s instead of the seconds a fresh interpreter needs to import torch). The
fork server is started once per parent process with ``start_env`` in its environment: variables read at process
start (glibc's MALLOC_*) take effect in every rank forked from it, so a rank should record what its environment
holds rather than trust what was asked. Per-launch variables (``rank_env``) are set by each rank itself.

:func:`prestart` starts the fork server ahead of the first launch, so that its imports overlap the caller's own work.

From a rank, :func:`tick` advances the parent's progress bar and :func:`send` hands an object to the parent's
``on_message(rank, obj)`` while the ranks run.

If a rank raises, the parent stops the others (they may be blocked in a collective) and raises :class:`RankFailed`
with that rank's error. The root cause wins: a rank that died without a word (killed by a signal other than
SIGTERM, e.g. SIGKILL or a segfault) before any reported error, else the earliest reported failure (the others are
usually its consequence: peers see the closed connection). A silent death is reported with its exit code or
signal and the tail of its log. Ctrl-C/SIGTERM in the parent (KeyboardInterrupt) stops every rank too.

Inside a torchrun job (or any launcher that set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT) ``launch`` refuses
with one line: its ranks would start a second job on this host beside the launcher's (``pmdb collect comms`` and
``pmdb collect workload`` join the launcher's job instead, see ``collectors.comms.sweep_ranks`` and
``collectors.workloads.torchrun``).
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing as mp
import os
import queue as queue_mod
import signal
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from tqdm import tqdm

from pmdb.errors import PmdbError

POLL_S = 0.2
GRACE_S = 1.0  # after a first failure, how long to wait for earlier-stamped ones
STOP_WAIT_S = 5.0  # per rank: after SIGTERM, then after SIGKILL
_counter: Any = None  # in a rank: the launch's shared progress counter (see tick)
_channel: Any = None  # in a rank: (queue, rank) to the parent (see send)

Target = Callable[[int, int, Any], Any]
OnMessage = Callable[[int, Any], None]


class RankFailed(PmdbError):
    """A rank raised, died or timed out; ``details`` holds its traceback or log tail. The CLI exits 2 when the rank
    raised a :class:`PmdbError` (``user_mistake``: a bad input found by the rank), 1 otherwise (a crash)."""

    def __init__(self, rank: int, message: str, details: str = "", *, user_mistake: bool = False):
        super().__init__(f"rank {rank} failed: {message}")
        self.rank = rank
        self.message = message
        self.details = details
        self.user_mistake = user_mistake
        self.exit_code = 2 if user_mistake else 1


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """os.environ with ``values`` set (started children copy it), restored afterwards."""
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


def under_launcher(environ: Mapping[str, str] | None = None) -> str | None:
    """'RANK=r, WORLD_SIZE=n' when this process is a rank of a torchrun job (or of a launcher that set RANK,
    WORLD_SIZE, MASTER_ADDR and MASTER_PORT), else None."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" in env or all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        return f"RANK={env.get('RANK', '?')}, WORLD_SIZE={env.get('WORLD_SIZE', '?')}"
    return None


def one_line(exc: BaseException) -> str:
    """'TypeName: first line of the message', at most 500 characters."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip()[:500]


def tick(count: int = 1) -> None:
    """From a rank: advance the parent's progress bar by ``count`` (no-op outside a launch)."""
    if _counter is not None:
        with _counter.get_lock():
            _counter.value += count


def send(obj: Any) -> None:
    """From a rank: hand ``obj`` (picklable) to the parent's ``on_message``; in order with this rank's result."""
    if _channel is None:
        raise RuntimeError("send() is for a rank started by collectors.launch.launch")
    queue, rank = _channel
    queue.put((rank, "message", obj))


def _die_with_parent() -> None:
    """Linux: have the kernel kill this rank when its parent dies."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _rank_main(target: Target, rank: int, world_size: int, payload: Any, results: Any, log_path: str | None,
               rank_env: Mapping[str, str], counter: Any) -> None:
    global _counter, _channel
    _die_with_parent()
    _counter, _channel = counter, (results, rank)
    if log_path:
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    os.environ.update(rank_env)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size))
    code = 0
    try:
        results.put((rank, "result", target(rank, world_size, payload)))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the parent
        results.put((rank, "error", (time.time(), one_line(exc), traceback.format_exc(), isinstance(exc, PmdbError))))
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


class _Inbox:
    """What the ranks handed over: results by rank, failures as (priority, stamp, rank, message, details,
    user mistake)."""

    def __init__(self, results: Any, on_message: OnMessage | None):
        self.results = results
        self.on_message = on_message
        self.done: dict[int, Any] = {}
        self.failures: list[tuple[int, float, int, str, str, bool]] = []

    def failed(self, rank: int) -> bool:
        return any(f[2] == rank for f in self.failures)

    def collect(self, wait_s: float) -> None:
        """Take every message waiting (up to ``wait_s`` for the first)."""
        try:
            item = self.results.get(timeout=wait_s)
        except queue_mod.Empty:
            return
        while True:
            rank, kind, value = item
            if kind == "result":
                self.done[rank] = value
            elif kind == "error":
                stamp, message, details, user_mistake = value
                self.failures.append((1, stamp, rank, message, details, user_mistake))
            elif self.on_message is not None:
                self.on_message(rank, value)
            try:
                item = self.results.get_nowait()
            except queue_mod.Empty:
                return

    def check_exits(self, procs: Sequence[Any], logs: Sequence[Path | None]) -> None:
        """A rank that ended without a result or an error died silently: a failure (first in line unless our own
        SIGTERM could have caused it)."""
        for rank, proc in enumerate(procs):
            if rank in self.done or self.failed(rank) or proc.is_alive():
                continue
            self.collect(POLL_S)  # a result may still be in flight
            if rank in self.done or self.failed(rank):
                continue
            code = proc.exitcode
            if code is not None and code < 0:
                why, priority = f"was killed by {_signal_name(-code)}", int(-code == signal.SIGTERM)
            else:
                why, priority = f"exited with code {code}", 0
            self.failures.append((priority, time.time(), rank, f"the process {why} without a result",
                                  _log_tail(logs[rank]), False))


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stop(procs: Sequence[Any]) -> None:
    """Terminate every live rank, then kill what is left."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(STOP_WAIT_S)
        if proc.is_alive():
            proc.kill()
            proc.join(STOP_WAIT_S)


def prestart(preload: Sequence[str], start_env: Mapping[str, str] | None = None) -> None:
    """Start the fork server now, with ``preload`` imported there and ``start_env`` in its environment, and return at
    once: its imports (seconds of torch) run while the caller goes on. A later :func:`launch` with the forkserver
    start method uses it; does nothing when one is running already."""
    from multiprocessing import forkserver

    mp.get_context("forkserver").set_forkserver_preload(list(preload))
    with _environ(start_env or {}):
        forkserver.ensure_running()


def launch(target: Target, world_size: int, payload: Any, *, start_env: Mapping[str, str] | None = None,
           rank_env: Mapping[str, str] | None = None, log_dir: Path | None = None, timeout_s: float | None = None,
           start_method: str = "forkserver", preload: Sequence[str] = (),
           progress: tuple[str, int] | None = None, on_message: OnMessage | None = None) -> list[Any]:
    """Run ``target`` on ``world_size`` ranks; their results in rank order, or :class:`RankFailed`.

    ``log_dir``: each rank's stdout/stderr goes to ``rank<r>.log`` there. ``timeout_s``: the whole launch (s).
    ``progress`` = (label, total): a tqdm bar (on a terminal) advanced by the ranks' :func:`tick` calls.
    ``on_message(rank, obj)`` receives the ranks' :func:`send` calls, in the parent."""
    if world_size < 1:
        raise PmdbError(f"bad world size {world_size}: must be >= 1")
    joined = under_launcher()
    if joined:
        raise PmdbError(f"this command starts its own ranks on this host and cannot run inside a torchrun job "
                        f"({joined}): run it once without torchrun (--world-size N); `pmdb collect comms` and "
                        f"`pmdb collect workload` join a torchrun job")
    ctx = mp.get_context(start_method)
    if start_method == "forkserver" and preload:
        ctx.set_forkserver_preload(list(preload))
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
    inbox = _Inbox(results, on_message)
    try:
        with _environ(start_env or {}):
            for proc in procs:
                proc.start()
        while len(inbox.done) < world_size and not inbox.failures:
            inbox.collect(POLL_S)
            if bar is not None:
                bar.update(counter.value - bar.n)
            if not inbox.failures:
                inbox.check_exits(procs, logs)
            if deadline is not None and time.monotonic() > deadline and not inbox.failures:
                missing = [r for r in range(world_size) if r not in inbox.done]
                inbox.failures.append((1, time.time(), missing[0], f"timed out after {timeout_s:.0f} s", "",
                                       False))
        if inbox.failures:
            end = time.monotonic() + GRACE_S
            while time.monotonic() < end and len(inbox.done) + len(inbox.failures) < world_size:
                inbox.collect(POLL_S)
            inbox.check_exits(procs, logs)
            _, _, rank, message, details, user_mistake = min(inbox.failures)
            raise RankFailed(rank, message, details, user_mistake=user_mistake)
    finally:
        if bar is not None:
            bar.close()
        _stop(procs)
        results.close()
    return [inbox.done[r] for r in range(world_size)]
