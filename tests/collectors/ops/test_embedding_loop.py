"""The 'loop' cache state of embedding lookups: a training loop of the lookup alone (a fresh batch each iteration,
forward then backward with the fused update, nothing flushed), what an in-step lookup finds in the caches."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from collectors.ops import catalogue
from collectors.ops.catalogue import BuildContext
from collectors.ops.embedding import LOOP_MAX_BATCHES, LOOP_POOL_BYTES, loop_batches
from collectors.ops.timer import DEFAULT_FLUSH_BYTES, TimerSettings, time_loop

SMALL = {"B": 16, "E": [300, 50], "D": [8, 4], "L": [3.0, 2.0], "sources": ["uniform", "zipf:1.05"], "seed": 0,
         "optimizer": "exact_sgd"}


def test_time_loop_runs_warm_up_then_enough_iterations_and_keeps_the_passes_apart():
    calls = []

    def step():
        calls.append(len(calls))
        return 10.0 + len(calls) % 2, 30.0   # µs: a forward alternating 10/11, a steady backward

    settings = TimerSettings(loop_warmup=2, loop_min_reps=5, loop_max_reps=50, loop_min_time_us=400.0)
    fwd, bwd = time_loop(step, settings)
    assert fwd.repetitions == bwd.repetitions == len(calls) - 2
    assert fwd.repetitions >= 10   # 400 µs at 40-41 µs per iteration, more than the 5 minimum
    assert fwd.warmup == 2 and fwd.min_us == 10.0 and bwd.median_us == 30.0
    capped = time_loop(step, TimerSettings(loop_warmup=0, loop_min_reps=3, loop_max_reps=4,
                                           loop_min_time_us=1e9))
    assert capped[0].repetitions == 4


def test_loop_batches_cover_twice_the_flush_within_the_pool_bound():
    small = dict(SMALL)
    assert loop_batches(small) == LOOP_MAX_BATCHES          # a few KiB per batch: as many as allowed
    # dlrm_mixed: 15 704 distinct rows at most (the two small tables whole), ~4 MB -> 34 wanted, capped
    mixed = {"B": 256, "E": [120000, 60000, 40000, 20000, 5000, 2000], "D": [64] * 6, "L": [2, 8, 4, 20, 30, 50]}
    assert loop_batches(mixed) == LOOP_MAX_BATCHES
    medium = {"B": 1024, "E": [10 ** 6] * 4, "D": [64] * 4, "L": [20.0] * 4}   # ~21 MB of rows per batch
    touched = 4 * 1024 * 20 * 64 * 4
    assert loop_batches(medium) == int(np.ceil(2 * DEFAULT_FLUSH_BYTES / touched)) == 7
    huge = {"B": 4096, "E": [10 ** 6] * 16, "D": [128] * 16, "L": [150.0] * 16}   # GBs of rows per batch
    assert loop_batches(huge) == 2
    # tiny tables (a few rows touched) looked up 26 million times a batch: the indices' bound decides
    crowded = {"B": 8192, "E": [100] * 16, "D": [8] * 16, "L": [200.0] * 16}
    per_batch = 8 * (8192 * 200 * 16 + 8192 * 16)
    assert per_batch * 2 > LOOP_POOL_BYTES and loop_batches(crowded) == 2
    assert loop_batches({**crowded, "B": 1024}) == LOOP_POOL_BYTES // (8 * (1024 * 200 * 16 + 1024 * 16))

def test_the_training_loop_draws_fresh_batches_and_updates_the_tables():
    torch.set_num_threads(1)
    spec = catalogue.get("embedding_lookup")
    for implementation in spec.implementations:
        built = spec.build(spec.check(dict(SMALL)), BuildContext(torch.device("cpu"), seed=4,
                                                                implementation=implementation))
        assert built.loop is not None
        first = built.fwd().detach().clone()   # the measured batch, before the loop's updates
        results = [built.loop() for _ in range(3)]
        assert all(f > 0 and b > 0 for f, b in results)
        assert not torch.equal(built.fwd().detach(), first)   # the loop's backward applied the fused update
        pool = built.loop.__closure__   # the drawn pool: loop_batches(SMALL) batches, none equal to another
        batches = next(c.cell_contents for c in pool if isinstance(c.cell_contents, list) and c.cell_contents)
        assert len(batches) == loop_batches(SMALL)
        assert not torch.equal(batches[0][0], batches[1][0])
        twin = spec.build(spec.check(dict(SMALL)), BuildContext(torch.device("cpu"), seed=4,
                                                               implementation=implementation))
        twin.loop()
        again = next(c.cell_contents for c in twin.loop.__closure__
                     if isinstance(c.cell_contents, list) and c.cell_contents)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))   # seeded: the same batches
        fwd, bwd = time_loop(built.loop, TimerSettings(loop_warmup=1, loop_min_reps=3, loop_min_time_us=0.0))
        assert fwd.repetitions >= 3 and fwd.median_us > 0 and bwd.median_us > 0


def test_only_cpu_builds_loop_and_other_ops_have_none():
    assert catalogue.get("embedding_lookup").loops
    assert not any(spec.loops for name, spec in catalogue.load().items() if name != "embedding_lookup")
    fc = catalogue.get("fully_connected")
    assert fc.build(fc.check({"M": 2, "N": 3, "K": 4}), BuildContext(torch.device("cpu"))).loop is None
