"""Op specs: grid sizes, determinism, seeded sampling, bounds and parameter checking."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from collectors.ops import catalogue
from collectors.ops.catalogue import LARGE_BOUND_US, QUICK_COUNT, canonical
from pmdb.errors import PmdbError


def _keys(configs):
    return [canonical(c) for c in configs]


def test_ml_ops_have_enough_default_configs():
    for name, spec in catalogue.load().items():
        configs = spec.configs("default", np.random.default_rng(0), 0)
        if spec.model == "ml":
            assert len(configs) >= 300, name
        else:
            assert len(configs) >= 30, name
        assert len(set(_keys(configs))) == len(configs), name
        assert len(spec.configs("quick", np.random.default_rng(0), 0)) == QUICK_COUNT


def test_default_grid_is_deterministic_and_random_is_seeded():
    spec = catalogue.get("bmm")
    assert _keys(spec.configs("default", np.random.default_rng(1), 0)) == \
        _keys(spec.configs("default", np.random.default_rng(2), 0))
    a = spec.configs("random", np.random.default_rng(5), 20)
    b = spec.configs("random", np.random.default_rng(5), 20)
    c = spec.configs("random", np.random.default_rng(6), 20)
    assert len(a) == 20 and _keys(a) == _keys(b) and _keys(a) != _keys(c)
    assert all(spec.estimate_us(x) <= LARGE_BOUND_US for x in a)


def test_embedding_default_configs_are_fixed_and_mix_heavy_and_light_tables():
    spec = catalogue.get("embedding_lookup")
    a = spec.configs("default", np.random.default_rng(0), 0)
    assert _keys(a) == _keys(spec.configs("default", np.random.default_rng(9), 0))
    pooling = np.concatenate([c["L"] for c in a])
    assert (pooling >= 20).mean() > 0.2 and (pooling < 20).mean() > 0.2
    assert len({len(c["E"]) for c in a}) > 3  # varying table counts


def test_default_embedding_sweep_covers_the_dlrm_presets_tables():
    from collectors.ops.embedding import BIG_COUNT, DEFAULT_COUNT, HEAVY_COUNT, table_bytes
    from collectors.ops.sweep import default_memory_cap
    from collectors.workloads.dlrm_presets import PRESETS

    spec = catalogue.get("embedding_lookup")
    configs = spec.configs("default", np.random.default_rng(0), 0)
    assert len(configs) == DEFAULT_COUNT + BIG_COUNT + HEAVY_COUNT and len(set(_keys(configs))) == len(configs)
    small, big = configs[:DEFAULT_COUNT], configs[DEFAULT_COUNT:DEFAULT_COUNT + BIG_COUNT]
    assert max(table_bytes(c) for c in small) <= 32 * 2 ** 20  # the first configs are those stores already hold
    assert all(spec.memory(c) <= default_memory_cap() for c in big)
    for preset in PRESETS.values():
        rows = max(t.num_rows for t in preset.tables)
        total = sum(4 * t.num_rows * t.dim for t in preset.tables)
        assert any(max(c["E"]) >= rows for c in big), preset.name
        assert max(table_bytes(c) for c in big) >= total, preset.name
    assert sum(table_bytes(c) > 256 * 2 ** 20 for c in big) >= BIG_COUNT // 4


def test_default_embedding_sweep_covers_one_rank_of_the_studys_heavy_tasks():
    """The sharding study's heavy tasks (world size 2, batch 512, E <= 100k, D 64) put 1e7-4e7 lookups and 100-400
    MB of tables on a rank: the heavy stratum's configs reach that, all tables heavy, under a few GiB each."""
    from collectors.ops.embedding import BIG_COUNT, DEFAULT_COUNT, HEAVY_COUNT, table_bytes
    from collectors.workloads.tasks import generate

    spec = catalogue.get("embedding_lookup")
    heavy = spec.configs("default", np.random.default_rng(0), 0)[DEFAULT_COUNT + BIG_COUNT:]
    assert len(heavy) == HEAVY_COUNT
    assert all(min(c["L"]) >= 20 for c in heavy) and all(table_bytes(c) > 64 * 2 ** 20 for c in heavy)
    assert all(spec.memory(c) <= 2.5 * 2 ** 30 for c in heavy)
    lookups = [c["B"] * float(np.dot(c["L"], c["D"])) for c in heavy]
    for task in generate(10, 0, 2, memory_bytes=16 * 2 ** 30, kind="heavy", dim=64, max_rows=100_000):
        per_rank = 512 * 64 * sum(t["pooling"] for t in task["tables"]) / 2
        assert max(lookups) >= per_rank          # the sweep reaches every task's per-rank lookups
    assert max(table_bytes(c) for c in heavy) >= 2 * max(
        sum(4 * t["num_rows"] * t["dim"] for t in task["tables"]) / 2
        for task in generate(10, 0, 2, memory_bytes=16 * 2 ** 30, kind="heavy", dim=64, max_rows=100_000))


def test_large_grid_is_larger():
    spec = catalogue.get("fully_connected")
    default = spec.configs("default", np.random.default_rng(0), 0)
    large = spec.configs("large", np.random.default_rng(0), 0)
    assert max(spec.flops(c) for c in large) > 10 * max(spec.flops(c) for c in default)


def test_bad_op_name():
    with pytest.raises(PmdbError, match="unknown op 'convolution'.*conv2d"):
        catalogue.get("convolution")


@pytest.mark.parametrize("op, config, message", [
    ("fully_connected", {"M": 4, "N": 4, "K": 4, "Q": 1}, "unknown parameter"),
    ("fully_connected", {"M": 4, "N": 4}, "missing parameter"),
    ("fully_connected", {"M": 4, "N": -4, "K": 4}, "bad value -4 for N"),
    ("fully_connected", {"M": 4.5, "N": 4, "K": 4}, "bad value 4.5 for M"),
    ("bmm", {"B": "two", "M": 4, "N": 4, "K": 4}, "bad value 'two' for B"),
    ("conv1d", {"B": 1, "L": 8, "IC": 3, "OC": 4, "groups": 2}, "do not make a valid conv1d"),
    ("conv1d", {"B": 1, "L": 8, "IC": 3, "OC": 4, "groups": 0}, "do not make a valid conv1d"),
    ("conv2d", {"B": 1, "H": 8, "IC": 3, "OC": 4, "stride": 1.5, "dilation": 1, "FH": 3, "is_depthwise": 0},
     "bad value 1.5 for stride"),
    ("dropout", {"B": 1, "M": 8, "N": 8, "p": 1.5}, "do not make a valid dropout"),
    ("fully_connected", {"B": 2, "M": 4, "N": 4, "K": 4}, "B is fixed at 1"),
    ("embedding_lookup", {"B": 8, "E": [10, 20], "D": [4], "L": [1, 1]}, "one value per table"),
    ("embedding_lookup", {"B": 8, "E": [10], "D": [4], "L": [0]}, "pooling factors"),
    ("embedding_lookup", {"B": 8, "E": [10], "D": [4], "L": [1], "sources": ["gauss"]}, "bad index source"),
])
def test_bad_parameters(op, config, message):
    with pytest.raises(PmdbError, match=message):
        catalogue.get(op).check(config)


def test_memory_estimates_grow_with_size():
    spec = catalogue.get("layer_norm")
    small, big = spec.check({"B": 1, "M": 8, "N": 8}), spec.check({"B": 64, "M": 512, "N": 1024})
    assert 0 < spec.memory(small) < spec.memory(big)


def test_bmm_sweeps_hold_each_transposed_layout_and_build_it():
    """A share of every sweep's bmm shapes again with its first (AT) or second (BT) operand stored transposed;
    the builder makes exactly that layout, and a bad flag is one clear error."""
    from collectors.ops.catalogue import BuildContext
    from collectors.ops.gemm import LAYOUT_SHARE
    from pmdb.errors import PmdbError

    spec = catalogue.get("bmm")
    for sweep in ("quick", "default", "random"):
        configs = spec.configs(sweep, np.random.default_rng(0), 60)
        plain = [c for c in configs if "AT" not in c and "BT" not in c]
        for flag in ("AT", "BT"):
            flagged = [c for c in configs if c.get(flag) == 1]
            assert len(flagged) == len(configs) // LAYOUT_SHARE, (sweep, flag)
            assert all({k: v for k, v in c.items() if k != flag} in plain for c in flagged)
    assert spec.check({"B": 2, "M": 3, "N": 4, "K": 5, "BT": 1}) == {"B": 2, "M": 3, "N": 4, "K": 5, "BT": 1}
    assert spec.check({"B": 2, "M": 3, "N": 4, "K": 5, "AT": 0}) == {"B": 2, "M": 3, "N": 4, "K": 5}
    with pytest.raises(PmdbError, match="bad value 2 for BT"):
        spec.check({"B": 2, "M": 3, "N": 4, "K": 5, "BT": 2})
    ctx = BuildContext(torch.device("cpu"), torch.float32, 0)
    for flags, a_strides, b_strides in (({}, (15, 5, 1), (20, 4, 1)), ({"BT": 1}, (15, 5, 1), (20, 1, 5)),
                                        ({"AT": 1}, (15, 1, 3), (20, 4, 1))):
        out = spec.build({"B": 2, "M": 3, "N": 4, "K": 5, **flags}, ctx).fwd()
        assert tuple(out.shape) == (2, 3, 4)
        assert out.grad_fn._saved_self.stride() == a_strides and out.grad_fn._saved_mat2.stride() == b_strides
