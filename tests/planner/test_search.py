"""The search: a hand-checkable best configuration, agreement with brute force, chunks and worker processes."""
import dataclasses

import numpy as np
import pytest

from pmdb.errors import PmdbError
from planner import space
from planner.evaluate import BREAKDOWN_KEYS, evaluate
from planner.search import search


def test_latency_bound_case_picks_data_parallelism(tiny, a100, planner_fw):
    """Every collective step costs 1 s, everything else microseconds. On 2 GPUs with a global batch of 2:
    data parallelism pays one gradient all-reduce (2 ring steps = 2 s); tensor parallelism pays 4 collectives per
    layer and pass; pipelining pays a send/recv per micro-batch and direction plus the tied-embedding all-reduce
    (>= 4 s). So the best is dp=2, micro-batch 1, no recomputation, and the distributed optimizer (same 2 ring
    steps as reduce-scatter + all-gather, but half the optimizer step)."""
    slow = dataclasses.replace(a100, nvlink_latency_us=1e6)
    result = search(tiny, slow, 2, 2, strategy="1d", fw=planner_fw, top=3, progress=False)
    best = result.top.iloc[0]
    assert (best["tp"], best["pp"], best["dp"], best["micro_batch"]) == (1, 1, 2, 1)
    assert best["recompute"] == "none" and bool(best["dist_opt"])
    assert 2.0 < best["time_s"] < 2.01
    second = result.top.iloc[1]
    assert (second["dp"], bool(second["dist_opt"])) == (2, False)
    assert result.top["time_s"].is_monotonic_increasing
    breakdown = result.top[list(BREAKDOWN_KEYS)].sum(axis=1)
    assert np.allclose(breakdown, result.top["time_s"])     # the parts add up to the iteration time


def _brute_force(model, system, gpus, batch, fw, strategy):
    domain = space.domain_size(gpus, system.nvlink_domain)
    cands = space.expand(model, strategy, space.structures(model, strategy, gpus, batch), batch, domain, fw)
    result = evaluate(model, system, cands, fw)
    return np.sort(result.time[result.fits]), len(cands)


@pytest.mark.parametrize("strategy", ["1d", "context", "summa"])
def test_chunked_search_agrees_with_brute_force(tiny, a100, planner_fw, strategy):
    times, n = _brute_force(tiny, a100, 16, 32, planner_fw, strategy)
    result = search(tiny, a100, 16, 32, strategy=strategy, fw=planner_fw, top=5, progress=False, chunk=50)
    assert result.evaluated == n and result.feasible == len(times)
    assert np.allclose(result.top["time_s"], times[:5])


@pytest.mark.slow
def test_worker_processes_give_the_same_answer(tiny, a100, planner_fw):
    one = search(tiny, a100, 16, 32, strategy="all", fw=planner_fw, top=5, progress=False, chunk=400)
    two = search(tiny, a100, 16, 32, strategy="all", fw=planner_fw, top=5, progress=False, chunk=400, workers=2)
    assert one.evaluated == two.evaluated > 1000
    assert np.allclose(one.top["time_s"], two.top["time_s"])
    assert list(one.top["strategy"]) == list(two.top["strategy"])


def test_search_space_respects_divisibility(tiny, planner_fw):
    rows = space.structures(tiny, "1d", 16, 32)
    assert all(tiny.heads % t1 == 0 and tiny.layers % pp == 0 and 32 % dp == 0 for t1, _, pp, dp in rows)
    assert {tuple(r) for r in rows} >= {(1, 1, 1, 16), (4, 1, 4, 1), (2, 1, 2, 4)}
    assert all(np.prod(p) == 8 and all(x % f == 0 for x, f in zip((4, 1, 2, 2), p))
               for p in space.placements(4, 1, 2, 2, 8))
    with pytest.raises(PmdbError, match="unknown strategy"):
        search(tiny, None, 16, 32, strategy="3d", fw=planner_fw, progress=False)
