"""The optimizer's element-wise ops (allocating sqrt/div, in-place add_, mul_, ...) and the dense embedding: real
torch builds on tiny shapes, grids that reach the sizes training steps run, bounded in-place repetitions, and the
page-fault cost of an allocating op above glibc's mmap threshold."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from collectors.ops import catalogue
from collectors.ops.elementwise import OPTIMIZER_OPS
from collectors.ops.catalogue import BuildContext
from collectors.ops.sweep import default_memory_cap
from collectors.ops.timer import TimerSettings, time_cpu

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time_us=0)
CPU = BuildContext(torch.device("cpu"), seed=5)


def _configs(name: str, sweep: str) -> list[dict]:
    return catalogue.get(name).configs(sweep, np.random.default_rng(0), 0)


@pytest.mark.parametrize("name", sorted(OPTIMIZER_OPS))
def test_optimizer_op_builds_and_times(name):
    spec = catalogue.get(name)
    assert spec.passes == ("fwd",) and spec.model == "roofline"
    built = spec.build(spec.check({"M": 3, "N": 5}), CPU)
    assert built.bwd is None
    out = built.fwd()
    assert tuple(out.shape) == (3, 5) and torch.isfinite(out).all()
    allocates = OPTIMIZER_OPS[name][-1]
    assert (out.data_ptr() != built.keep[0].data_ptr()) == allocates  # in-place ops return their first operand
    timing = time_cpu(built.fwd, FAST)
    assert timing.repetitions == 3 and timing.median_us > 0


@pytest.mark.parametrize("name", sorted(n for n, v in OPTIMIZER_OPS.items() if not v[-1]))
def test_in_place_ops_stay_bounded_over_repetitions(name):
    built = catalogue.get(name).build({"M": 8, "N": 16}, CPU)
    for _ in range(1001):
        out = built.fwd()
    assert torch.isfinite(out).all() and out.abs().max() <= 2.5  # operands are U(-1, 1)


def test_optimizer_grids_reach_big_parameters_within_the_memory_cap():
    spec = catalogue.get("sqrt")
    default, quick = _configs("sqrt", "default"), _configs("sqrt", "quick")
    numels = [c["M"] * c["N"] for c in default]
    assert max(numels) >= 2 ** 24 and min(numels) <= 64
    assert sum(2 ** 22 <= n <= 2 ** 24 for n in numels) >= 6  # dense around the 32 MiB mmap threshold
    assert max(c["M"] * c["N"] for c in quick) == max(numels)
    assert all(spec.memory(c) <= default_memory_cap() for c in default + _configs("sqrt", "large"))
    random = spec.configs("random", np.random.default_rng(3), 15)
    assert len(random) == 15 and random == spec.configs("random", np.random.default_rng(3), 15)


def test_dense_embedding_builds_forward_and_dense_weight_gradient():
    spec = catalogue.get("embedding")
    config = spec.check({"V": 50, "D": 8, "N": 12})
    built = spec.build(config, CPU)
    out = built.fwd()
    assert tuple(out.shape) == (12, 8)
    (grad,) = built.bwd()
    assert tuple(grad.shape) == (50, 8) and torch.isfinite(grad).all()
    indices = built.keep[-1]
    touched = set(torch.nonzero((grad != 0).any(dim=1)).flatten().tolist())
    assert touched == set(indices.tolist())  # only the gathered rows get a gradient
    assert time_cpu(built.bwd, FAST).median_us > 0


def test_dense_embedding_grid_reaches_the_transformers_tables():
    default = _configs("embedding", "default")
    assert len(default) >= 300 and len(_configs("embedding", "quick")) == catalogue.QUICK_COUNT
    assert max(c["V"] for c in default) == 50257 and max(c["D"] for c in default) == 1024
    assert max(c["N"] for c in default) == 8192
    spec = catalogue.get("embedding")
    assert all(spec.memory(c) <= default_memory_cap() for c in default + _configs("embedding", "large"))


_RATIO_SCRIPT = """
import json, resource, torch
from collectors.ops import catalogue
from collectors.ops.catalogue import BuildContext
from collectors.ops.timer import TimerSettings, time_cpu
from collectors.workloads.allocator import apply_in_process
apply_in_process()
torch.set_num_threads(1)
ctx, config = BuildContext(torch.device("cpu"), seed=5), {"M": 12 * 1024, "N": 1024}
settings = TimerSettings(warmup=1, min_reps=1, max_reps=1, min_time_us=0)
fns = {n: catalogue.get(n).build(config, ctx).fwd for n in ("sqrt", "add_")}
rounds = {n: [] for n in fns}
for _ in range(9):   # alternated, so that a busy neighbour slows both alike
    for n, fn in fns.items():
        rounds[n].append(time_cpu(fn, settings).median_us)
ratios = sorted(s / a for s, a in zip(rounds["sqrt"], rounds["add_"]))
out = {n: sorted(t)[4] for n, t in rounds.items()}
out["ratio"] = ratios[4]
sqrt = fns["sqrt"]
sqrt()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(3):
    sqrt()
out["sqrt_faults"] = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 3
print(json.dumps(out))
"""


def _sqrt_and_add_medians(env: dict[str, str]) -> dict[str, float]:
    """Medians (µs) of sqrt and add_ of 12M floats, the median of their ratio over 9 alternated rounds, and sqrt's
    minor page faults per call, in a fresh process under ``env`` + pmdb's malloc settings (as ``pmdb collect ops``
    does: a MALLOC_* variable of the environment wins)."""
    root = Path(__file__).resolve().parents[3]
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    done = subprocess.run([sys.executable, "-c", _RATIO_SCRIPT], cwd=root, capture_output=True, text=True,
                          timeout=120, check=True, env={**environ, **env})
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_allocating_sqrt_of_a_big_tensor_reuses_heap_pages_under_pmdb_settings():
    """12M floats (48 MiB = 12,288 pages, above glibc's 32 MiB mmap threshold). With mmap on (glibc's default
    M_MMAP_MAX, which a user's environment may ask for), sqrt's fresh output is page-faulted in and unmapped every
    call: over twice an in-place add_ (which moves 1.5x sqrt's bytes). Under pmdb's settings (mmap off) the output
    comes from the heap the previous call freed, as in a training step after its first iteration: no page faults,
    under half the mapped sqrt's time. Times are compared as sqrt / add_ ratios of alternated calls (the suite's
    load once slowed a run of add_ calls to 15 ms: a busy neighbour moves both alike, not the ratio)."""
    mapped = _sqrt_and_add_medians({"MALLOC_MMAP_MAX_": "65536"})
    assert mapped["sqrt_faults"] > 10_000 and mapped["ratio"] > 2.0, mapped
    heap = _sqrt_and_add_medians({})
    assert heap["sqrt_faults"] < 100, heap
    assert heap["ratio"] < 0.5 * mapped["ratio"], (heap, mapped)
