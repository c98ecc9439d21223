"""The timer: repetition policy, statistics, cold flushing, and the kernel breakdown."""
from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from collectors.ops.kernels import kernel_breakdown
from collectors.ops.timer import CacheFlusher, TimerSettings, Timing, measure, time_cpu, timing_environment


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
    flusher = CountingFlusher(64 * 2 ** 20)
    data = torch.rand(2 * 2 ** 20)  # 8 MiB: fits the last-level cache when warm
    settings = TimerSettings(warmup=1, min_reps=10, cold_min_reps=10, cold_max_reps=10)
    cold = measure(lambda: data.sum(), "cold", settings, torch.device("cpu"), flusher)
    assert flusher.count == cold.repetitions == 10
    warm = measure(lambda: data.sum(), "warm", settings, torch.device("cpu"), None)
    assert cold.min_us > 1.1 * warm.min_us


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
