"""The timer: repetition policy, statistics, cold flushing, and the kernel breakdown."""
from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from collectors.ops.kernels import kernel_breakdown
from collectors.ops.timer import (CacheFlusher, TimerSettings, Timing, measure, time_cpu, time_cpu_both,
                                  timing_environment)


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: one thread keeps the test's own timings steady
    yield
    torch.set_num_threads(before)


class CountingFlusher(CacheFlusher):
    """A real flusher that also counts its flushes."""

    def __init__(self, nbytes: int):
        super().__init__(nbytes)
        self.count = 0

    def flush(self) -> None:
        super().flush()
        self.count += 1


def test_statistics_from_samples():
    t = Timing.from_samples([3.0, 1.0, 2.0, 10.0], warmup=2)
    assert (t.median_us, t.mean_us, t.min_us, t.repetitions, t.warmup) == (2.5, 4.0, 1.0, 4, 2)
    assert t.std_us == pytest.approx(np.std([3, 1, 2, 10], ddof=1))
    assert t.cv == pytest.approx(t.std_us / 4.0)


def test_repeats_until_min_time_and_min_reps():
    settings = TimerSettings(warmup=1, min_reps=3, max_reps=100, min_time_us=20_000)
    t = time_cpu(lambda: time.sleep(0.002), settings)
    assert 3 <= t.repetitions <= 12 and t.repetitions * t.mean_us >= 20_000
    assert t.min_us >= 2_000
    fast = time_cpu(lambda: None, TimerSettings(min_reps=5, max_reps=7, min_time_us=1e9))
    assert fast.repetitions == 7  # capped by max_reps


def test_cold_flushes_before_every_repetition_and_is_slower(one_thread):
    """Fastest cold against fastest warm repetition, over three alternating rounds: a neighbour evicting the warm
    operands (or preempting a repetition) slows some repetitions, never every one. The operands (512 KiB) fit one
    core's L2 (2 MiB here): warm they are read from it, cold the 64 MiB stream has pushed them out, whatever the size
    of the shared last-level cache (480 MiB on this host: operands of a few MiB stay in it through a 64 MiB flush)."""
    flusher = CountingFlusher(64 * 2 ** 20)
    data = torch.rand(2 ** 17)  # 512 KiB
    settings = TimerSettings(warmup=1, min_reps=30, max_reps=30, min_time_us=0, cold_min_reps=10, cold_max_reps=10,
                             cold_min_time_us=0)
    colds, warms = [], []
    for _ in range(3):
        before = flusher.count
        cold = measure(lambda: data.sum(), "cold", settings, torch.device("cpu"), flusher)
        assert flusher.count - before == cold.repetitions == 10
        colds.append(cold.min_us)
        warms.append(measure(lambda: data.sum(), "warm", settings, torch.device("cpu"), None).min_us)
    assert min(colds) > 1.1 * min(warms)


class LoggingFlusher(CacheFlusher):
    """A real flusher that logs its flushes in a shared list."""

    def __init__(self, log: list[str]):
        super().__init__(2 ** 20)
        self.log = log

    def flush(self) -> None:
        super().flush()
        self.log.append("flush")


def test_warm_and_cold_repetitions_alternate():
    log: list[str] = []
    settings = TimerSettings(warmup=1, min_reps=6, max_reps=6, min_time_us=0, cold_min_reps=3, cold_max_reps=3,
                             cold_min_time_us=0)
    warm, cold = time_cpu_both(lambda: log.append("call"), settings, LoggingFlusher(log))
    assert (warm.repetitions, cold.repetitions, warm.warmup, cold.warmup) == (6, 3, 1, 0)
    # warm-up, then (flush, cold call, warm call) x 3, then the warm state alone
    assert log == ["call"] + ["flush", "call", "call"] * 3 + ["call"] * 3


def test_rewarm_runs_after_every_flush_and_only_cold():
    log: list[str] = []
    settings = TimerSettings(warmup=1, min_reps=4, max_reps=4, min_time_us=0, cold_min_reps=2, cold_max_reps=2,
                             cold_min_time_us=0)
    time_cpu_both(lambda: log.append("call"), settings, LoggingFlusher(log), rewarm=lambda: log.append("twin"))
    assert log == ["call"] + ["flush", "twin", "call", "call"] * 2 + ["call"] * 2
    log.clear()
    measure(lambda: log.append("call"), "warm", settings, torch.device("cpu"), LoggingFlusher(log),
            rewarm=lambda: log.append("twin"))
    assert "twin" not in log and "flush" not in log


def test_cold_with_the_op_rewarmed_leaves_only_its_operands_cold(one_thread):
    """A 1 KiB in-place add: after the 64 MiB stream its own code is evicted too, which a training step (the same op
    on the next layer's tensors just before) never pays; re-running it on a twin's operands after the flush removes
    that part (measured here: 8.3 µs cold, 2.4 µs rewarmed, 1.1 µs warm). Fastest repetitions, three rounds."""
    settings = TimerSettings(warmup=1, cold_min_reps=15, cold_max_reps=15, cold_min_time_us=0)
    flusher = CacheFlusher()
    p, g, p2, g2 = (torch.ones(256) for _ in range(4))
    plain, rewarmed = [], []
    for _ in range(3):
        plain.append(measure(lambda: p.add_(g, alpha=1e-3), "cold", settings, torch.device("cpu"), flusher).min_us)
        rewarmed.append(measure(lambda: p.add_(g, alpha=1e-3), "cold", settings, torch.device("cpu"), flusher,
                                rewarm=lambda: p2.add_(g2, alpha=1e-3)).min_us)
    assert min(plain) > 1.5 * min(rewarmed)


def _preempted(slow_calls: int, slow_s: float, fast_s: float):
    """A callable whose first ``slow_calls`` calls sleep ``slow_s`` (a preempted repetition), later ones ``fast_s``."""
    calls = []

    def fn() -> None:
        calls.append(1)
        time.sleep(slow_s if len(calls) <= slow_calls else fast_s)
    return fn


def test_repetitions_are_added_while_the_median_looks_preempted():
    settings = TimerSettings(warmup=0, min_reps=5, max_reps=9, min_time_us=0)
    adaptive = time_cpu(_preempted(3, 0.03, 0.002), settings)        # 3 of the first 5 slowed
    assert 7 <= adaptive.repetitions <= 9 and adaptive.median_us < 15_000
    fixed = time_cpu(_preempted(3, 0.03, 0.002), replace(settings, spread_limit=float("inf")))
    assert fixed.repetitions == 5 and fixed.median_us > 25_000      # without the rule the slowed ones are the median
    capped = time_cpu(_preempted(3, 0.03, 0.002), replace(settings, max_reps=6))
    assert capped.repetitions == 6                                   # never beyond the state's max_reps


def test_jitter_below_the_floor_adds_nothing():
    settings = TimerSettings(warmup=0, min_reps=5, max_reps=50, min_time_us=0)
    assert time_cpu(lambda: None, settings).repetitions == 5      # µs spreads are not preemptions


def test_cold_needs_a_flusher():
    with pytest.raises(ValueError):
        measure(lambda: None, "cold", TimerSettings(), torch.device("cpu"), None)


def test_environment_records_threads_and_allocator():
    env = timing_environment()
    assert env["threads"] == torch.get_num_threads() and "allocator" in env and "allocator_env" in env


def test_kernel_breakdown_names_the_ops():
    x = torch.rand(64, 32, requires_grad=True)
    w = torch.rand(16, 32, requires_grad=True)
    rows = kernel_breakdown(lambda: torch.nn.functional.linear(x, w).relu(), torch.device("cpu"), calls=2)
    names = {r["name"] for r in rows}
    assert {"aten::relu", "aten::mm"} & names and all(r["us"] > 0 for r in rows)
    assert rows == sorted(rows, key=lambda r: -r["us"])
