"""Device-generic timing of one callable.

CPU: a monotonic clock (``perf_counter_ns``) around each call, after untimed warm-up calls, repeated until a
minimum measured time and repetition count are reached. *warm* repeats back to back (caches hold the operands);
*cold* evicts the op's own operands from every cache level before every repetition (the CPU's cache-line flush,
:mod:`collectors.ops.cache_evict`; where that cannot be built, a stream of twice the last-level cache), so each call
finds its operands in memory, as inside a training step, on a 32 MiB or a 480 MiB last-level cache alike; the code the op runs stays warm as it does inside a step (the dispatch path is
re-warmed, see CacheFlusher, and the sweep re-runs the same op on a twin's operands: ``rewarm``). On a CPU a repetition's time
includes releasing what the op returned: with glibc's mmap on (a user's MALLOC_MMAP_MAX_; pmdb's allocator settings
turn it off) a buffer above the 32 MiB mmap threshold is page-faulted in by the op and unmapped when freed,
milliseconds for tens of MiB that a training step under those settings pays too. Every allocation of a step is
freed once, so charging the release to the op that allocated keeps the step's total. CUDA: events around each call
with synchronisation ('device'). *loop* (:func:`time_loop`, ops whose builder gives one: embedding lookups) times
the op as a training loop runs it: each repetition a fresh batch, its forward then its backward (with the fused
update), nothing flushed, so a call finds in the caches what the previous iteration left there.
All times are microseconds.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

import numpy as np
import torch

from collectors.ops import cache_evict

LOOP = "loop"  # the cache state of time_loop's timings
DEFAULT_FLUSH_BYTES = 64 * 2 ** 20  # the least a fallback stream moves (> a 32 MiB LLC; see CacheFlusher)


@dataclass(frozen=True)
class TimerSettings:
    """Repetition policy. ``min_time_us``: stop once the timed calls add up to this (and ``min_reps`` are done).

    At least 5 repetitions in either cache state, so that one preemption by a noisy neighbour (this is a shared VM:
    7% steal time when idle) cannot become the median; with 3 cold repetitions 8-10% of stored medians were more
    than twice their fastest repetition. Adaptive on top: while the repetitions are spread (their median above
    ``spread_limit`` x their fastest and more than ``spread_floor_us`` slower: a scheduler slice, not jitter),
    repetitions are added up to the state's ``max_reps`` or ``spread_max_time_us`` of timed calls, so that
    preempted repetitions cannot become the median even when several are. ``rewarm_max_bytes``: a cold repetition of
    a config holding at most this much memory is preceded by the same op on a twin's operands (see
    :func:`time_cpu`)."""

    warmup: int = 1
    min_reps: int = 5
    max_reps: int = 200
    min_time_us: float = 5_000.0
    cold_min_reps: int = 5
    cold_max_reps: int = 9
    cold_min_time_us: float = 3_000.0
    flush_bytes: int = DEFAULT_FLUSH_BYTES
    rewarm_max_bytes: int = DEFAULT_FLUSH_BYTES
    spread_limit: float = 1.5
    spread_floor_us: float = 100.0
    spread_max_time_us: float = 1_000_000.0
    loop_warmup: int = 2
    loop_min_reps: int = 7
    loop_max_reps: int = 60
    loop_min_time_us: float = 30_000.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def policy(self, cold: bool) -> "Policy":
        """The stopping rule of one cache state (cold: flushed before every repetition)."""
        reps = (self.cold_min_reps, self.cold_max_reps, self.cold_min_time_us) if cold else \
            (self.min_reps, self.max_reps, self.min_time_us)
        return Policy(*reps, self.spread_limit, self.spread_floor_us, self.spread_max_time_us)

    def loop_policy(self) -> "Policy":
        """The stopping rule of the 'loop' state (:func:`time_loop`), on whole iterations."""
        return Policy(self.loop_min_reps, self.loop_max_reps, self.loop_min_time_us, self.spread_limit,
                      self.spread_floor_us, self.spread_max_time_us)


@dataclass(frozen=True)
class Policy:
    """When one cache state has enough repetitions (see :class:`TimerSettings`); times µs."""

    min_reps: int
    max_reps: int
    min_time_us: float
    spread_limit: float = float("inf")
    spread_floor_us: float = 0.0
    spread_max_time_us: float = 0.0

    def spread(self, samples: list[float]) -> bool:
        """Whether the median repetition looks preempted: well above the fastest, by more than jitter."""
        fastest, median = min(samples), float(np.median(samples))
        return median > self.spread_limit * fastest and median - fastest > self.spread_floor_us

    def done(self, samples: list[float], total_us: float) -> bool:
        count = len(samples)
        if count >= self.max_reps:
            return True
        if count < max(self.min_reps, 1) or total_us < self.min_time_us:
            return False
        return total_us >= self.spread_max_time_us or not self.spread(samples)


@dataclass(frozen=True)
class Timing:
    """Statistics of the timed repetitions (µs)."""

    median_us: float
    mean_us: float
    std_us: float
    min_us: float
    repetitions: int
    warmup: int

    @property
    def cv(self) -> float:
        """Coefficient of variation std / mean."""
        return self.std_us / self.mean_us if self.mean_us > 0 else float("nan")

    @classmethod
    def from_samples(cls, samples_us: list[float], warmup: int) -> "Timing":
        arr = np.asarray(samples_us, dtype=float)
        return cls(float(np.median(arr)), float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0,
                   float(arr.min()), int(arr.size), warmup)


class CacheFlusher:
    """Evicts an op's operands from the caches while keeping the framework's own code path warm.

    :meth:`target` names what the timed callable holds; ``flush`` then writes back and drops every cache line of
    those operands from L1, L2 and the last-level cache (:mod:`collectors.ops.cache_evict`), at a cost in proportion
    to the operands whatever the host's caches. Where the eviction helper cannot be built, or nothing was targeted,
    it streams ``max(nbytes, 2 x llc_bytes)`` through the caches instead (an in-place add reads and writes every
    line; numpy runs it on one thread, so it does not wait on torch's thread pool): enough to push out what was
    there on any LLC, at ~60 ms per repetition on a 480 MiB one. Either way it then runs a few tiny autograd ops on
    4-element tensors: a stream also evicts the dispatcher's code and metadata, which stay hot inside a training
    step (measured on the 32 MiB host: a 4 µs relu then took ~120 µs "cold", but ~10 µs after the tiny ops, while
    large ops were unchanged). :attr:`flushed` says what the last flush did, for the measurement row.
    """

    def __init__(self, nbytes: int = DEFAULT_FLUSH_BYTES, llc_bytes: int | None = None, evict: bool = True):
        self.evictor = cache_evict.load() if evict else None
        self.stream_bytes = max(int(nbytes), 2 * int(llc_bytes or 0))
        self.buffer: np.ndarray | None = None
        self._ranges: list[tuple[int, int]] | None = None
        self._vec = torch.ones(4, requires_grad=True)
        self._mat = torch.ones(4, 4, requires_grad=True)

    def target(self, *roots: Any) -> None:
        """Evict what ``roots`` hold (the timed callable, its built config) at every flush from now on."""
        self._ranges = cache_evict.operand_ranges(*roots) if self.evictor is not None else None

    @property
    def evicting(self) -> bool:
        """Whether a flush evicts the targeted operands (else it streams)."""
        return self.evictor is not None and bool(self._ranges)

    @property
    def flushed(self) -> str:
        """What a flush does now: '<method>:<operand bytes>' (e.g. 'clflushopt:12582912') or 'stream:<bytes>'."""
        if self.evicting:
            return f"{self.evictor.method}:{sum(n for _, n in self._ranges)}"
        return f"stream:{self.stream_bytes}"

    def flush(self) -> None:
        if self.evicting:
            self.evictor.evict(self._ranges)
        else:
            if self.buffer is None:
                self.buffer = np.ones(max(1, self.stream_bytes // 4), dtype=np.float32)
            np.add(self.buffer, 1.0, out=self.buffer)
        self.rewarm()

    def rewarm(self) -> None:
        """Touch the Python -> ATen -> autograd dispatch path with operands that are not the measured op's."""
        out = torch.nn.functional.linear(self._mat, self._mat).relu().add(self._vec).mul(self._vec).sum()
        torch.autograd.grad(out, (self._vec,))


def _timed(fn: Callable[[], Any]) -> float:
    """µs of one call, the release of what it returned included (see the module docstring)."""
    start = time.perf_counter_ns()
    out = fn()
    del out
    return (time.perf_counter_ns() - start) / 1e3


def _warm_up(fn: Callable[[], Any], count: int) -> None:
    for _ in range(count):
        out = fn()
        del out


def _cold_call(fn: Callable[[], Any], flusher: CacheFlusher, rewarm: Callable[[], Any] | None) -> float:
    """µs of one cold call: flush, re-run the op on other operands (``rewarm``), then time ``fn``."""
    flusher.flush()
    if rewarm is not None:
        _warm_up(rewarm, 1)
    return _timed(fn)


def time_cpu(fn: Callable[[], Any], settings: TimerSettings, flusher: CacheFlusher | None = None,
             warmup: int | None = None, rewarm: Callable[[], Any] | None = None) -> Timing:
    """Time ``fn`` on the host; cold when a ``flusher`` is given (flushed before every repetition). ``warmup``
    overrides the settings' count (0 when the same callable was just timed in another cache state). ``rewarm``
    (cold only): the same op on a twin's operands, run after each flush so that the op's own code is warm and only
    its operands are cold, as when a training step runs the op on the next layer's tensors; without it a 1 KiB
    ``add_`` took 8.3 µs cold against 2.4 µs with it and 1.1 µs warm, while 4 MiB operands changed < 5%."""
    warmup = settings.warmup if warmup is None else warmup
    _warm_up(fn, warmup)
    cold = flusher is not None
    policy = settings.policy(cold)
    samples: list[float] = []
    while not policy.done(samples, sum(samples)):
        samples.append(_cold_call(fn, flusher, rewarm) if cold else _timed(fn))
    return Timing.from_samples(samples, warmup)


def time_cpu_both(fn: Callable[[], Any], settings: TimerSettings, flusher: CacheFlusher,
                  warmup: int | None = None, rewarm: Callable[[], Any] | None = None) -> tuple[Timing, Timing]:
    """(warm, cold) timings of ``fn`` with their repetitions alternated: flush, a cold call, a warm call (its
    operands are cached by the cold call just made), and again, until one state has enough; the other then goes on
    alone. A noisy neighbour's burst then slows both states alike instead of one of them. ``rewarm``: see
    :func:`time_cpu`."""
    warmup = settings.warmup if warmup is None else warmup
    _warm_up(fn, warmup)
    warm_policy, cold_policy = settings.policy(False), settings.policy(True)
    warm: list[float] = []
    cold: list[float] = []
    while not (warm_policy.done(warm, sum(warm)) and cold_policy.done(cold, sum(cold))):
        if not cold_policy.done(cold, sum(cold)):
            cold.append(_cold_call(fn, flusher, rewarm))
        if not warm_policy.done(warm, sum(warm)):
            warm.append(_timed(fn))
    return Timing.from_samples(warm, warmup), Timing.from_samples(cold, 0)


def time_cuda(fn: Callable[[], Any], settings: TimerSettings, device: torch.device) -> Timing:
    """Time ``fn`` on a CUDA device, one call between two events, synchronised after each: the single-call
    latency, host launch path included for a small op (``collect ops`` stores the kernels' device time beside
    it: :mod:`collectors.ops.cuda_timing`)."""
    with torch.cuda.device(device):
        for _ in range(settings.warmup):
            fn()
        torch.cuda.synchronize(device)
        samples: list[float] = []
        policy = settings.policy(False)
        while not policy.done(samples, sum(samples)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)  # ms -> µs
    return Timing.from_samples(samples, settings.warmup)


def time_loop(step: Callable[[], tuple[float, float]], settings: TimerSettings) -> tuple[Timing, Timing]:
    """(forward, backward) timings of an op in a training loop of its own: ``step()`` runs one iteration on the
    next batch and returns its (forward µs, backward µs). ``loop_warmup`` untimed iterations first; then iterations
    until ``loop_min_reps`` are done and ``loop_min_time_us`` spent in them (at most ``loop_max_reps``)."""
    for _ in range(settings.loop_warmup):
        step()
    policy = settings.loop_policy()
    fwd: list[float] = []
    bwd: list[float] = []
    total: list[float] = []
    while not policy.done(total, sum(total)):
        f, b = step()
        fwd.append(f)
        bwd.append(b)
        total.append(f + b)
    return Timing.from_samples(fwd, settings.loop_warmup), Timing.from_samples(bwd, settings.loop_warmup)


def measure(fn: Callable[[], Any], cache_state: str, settings: TimerSettings, device: torch.device,
            flusher: CacheFlusher | None, warmup: int | None = None,
            rewarm: Callable[[], Any] | None = None) -> Timing:
    """Time ``fn`` in one cache state: 'warm' or 'cold' on CPU, 'device' on CUDA (``rewarm``: see time_cpu)."""
    if cache_state == "device":
        return time_cuda(fn, settings, device)
    if cache_state == "cold" and flusher is None:
        raise ValueError("cold timing needs a CacheFlusher")
    cold = cache_state == "cold"
    return time_cpu(fn, settings, flusher if cold else None, warmup, rewarm if cold else None)


def timing_environment() -> dict[str, Any]:
    """What the timings depend on besides the op: threads and allocator settings."""
    libc = ctypes.util.find_library("c")
    glibc = None
    if libc:
        try:
            func = ctypes.CDLL(libc).gnu_get_libc_version
            func.restype = ctypes.c_char_p
            glibc = func().decode()
        except (OSError, AttributeError):
            glibc = None
    allocator_env = {k: v for k, v in os.environ.items()
                     if k.startswith(("MALLOC_", "GLIBC_TUNABLES", "LD_PRELOAD", "JE_", "MALLOC_CONF", "TCMALLOC"))}
    from pmdb.platform import cache_sizes

    evictor = cache_evict.load()
    return {"caches": {**cache_sizes(), "line_bytes": cache_evict.line_bytes()},
            "cold_flush": evictor.method if evictor is not None else f"stream ({cache_evict.why_unavailable()})",
            "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
            "glibc": glibc, "allocator_env": allocator_env,
            "allocator": "preloaded: " + os.environ["LD_PRELOAD"] if os.environ.get("LD_PRELOAD") else "glibc malloc",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "torch": torch.__version__}
