"""Ground-truth timing and summary; the task generator's laws."""
from __future__ import annotations

import math

import numpy as np
import pytest

from collectors.workloads.allocator import allocator_env, allocator_record
from collectors.workloads.ground_truth import summarise, time_iterations
from collectors.workloads.tasks import draw_pooling, generate, lognormal_for


def test_time_iterations_runs_warmup_untimed_and_barriers_every_iteration():
    calls, barriers = [], []
    times = time_iterations(lambda k: calls.append(k), [0, 1], [2, 3, 4], barrier=lambda: barriers.append(1))
    assert calls == [0, 1, 2, 3, 4] and len(barriers) == 5 and len(times) == 3
    slow = time_iterations(lambda k: sum(range(200_000)), [], [0, 1])
    assert all(t > 100 for t in slow)  # µs: summing 200k integers takes well over 0.1 ms


def test_summary_is_median_of_per_iteration_max():
    per_rank = [[10, 30, 20, 40, 50], [12, 28, 25, 39, 10]]
    worst = [12, 30, 25, 40, 50]
    got = summarise(per_rank)
    assert got["measured_us"] == np.median(worst) == 30
    p10, p90 = np.percentile(worst, [10, 90])
    assert got["spread"] == pytest.approx((p90 - p10) / 30)
    assert got["max_us"] == 50 and got["min_us"] == 12


def test_allocator_settings_defaults_and_user_values():
    env = allocator_env({})
    assert set(env) == {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_"}
    assert allocator_env({"MALLOC_MMAP_THRESHOLD_": "1"})["MALLOC_MMAP_THRESHOLD_"] == "1"
    record = allocator_record({"MALLOC_TRIM_THRESHOLD_": "5", "PATH": "/bin"})
    assert record["MALLOC_TRIM_THRESHOLD_"] == "5" and "PATH" not in record and "libc" in record


@pytest.mark.parametrize("mean, share", [(15.8, 103 / 856), (40.0, 0.5), (8.3, 0.12)])
def test_pooling_law_keeps_the_mean_and_the_heavy_share_when_possible(mean, share):
    mu, sigma = lognormal_for(mean, share)
    assert math.exp(mu + sigma ** 2 / 2) == pytest.approx(mean)
    rng = np.random.default_rng(0)
    draws = np.array([draw_pooling(rng, mu, sigma, False) for _ in range(20000)])
    heavy = (draws >= 20).mean()
    max_share = 1 - 0.5 * (1 + math.erf(math.sqrt(2 * math.log(20 / mean)) / math.sqrt(2))) if mean < 20 else 1
    assert heavy == pytest.approx(min(share, max_share), abs=0.015)
    assert all(draw_pooling(rng, mu, sigma, True) >= 20 for _ in range(200))


def test_generate_is_reproducible_and_respects_the_cap():
    a = generate(3, 11, 4, memory_bytes=2**30, kind="normal", dim=8)
    b = generate(3, 11, 4, memory_bytes=2**30, kind="normal", dim=8)
    assert a == b and {t["kind"] for t in a} == {"normal"}
    assert all(int(13 * 4 * 0.7) <= len(t["tables"]) < int(13 * 4 * 1.3) for t in a)
    assert all(sum(x["num_rows"] * 8 * 4 for x in t["tables"]) <= int(0.8 * 2**30) for t in a)
    capped = generate(2, 11, 1, memory_bytes=2**30, kind="heavy", dim=8, max_rows=300)
    assert all(x["num_rows"] <= 300 and x["pooling"] >= 20 for t in capped for x in t["tables"])
