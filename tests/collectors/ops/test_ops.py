"""Every registered op on a tiny shape on CPU: forward gives the expected shape, backward gives finite gradients
shaped like the inputs (or, for the embedding lookup, updates the tables), and the timer can time both."""
from __future__ import annotations

import pytest
import torch

from collectors.ops import catalogue
from collectors.ops.catalogue import BuildContext
from collectors.ops.timer import TimerSettings, time_cpu

# op -> (tiny config, expected forward output shape)
TINY = {
    "fully_connected": ({"M": 4, "N": 6, "K": 8}, (4, 6)),
    "bmm": ({"B": 2, "M": 3, "N": 5, "K": 4}, (2, 3, 5)),
    "conv2d": ({"B": 2, "H": 10, "IC": 3, "OC": 4, "stride": 2, "dilation": 1, "FH": 3, "is_depthwise": 0},
               (2, 4, 4, 4)),
    "conv1d": ({"B": 2, "L": 9, "IC": 4, "OC": 6, "groups": 2}, (2, 6, 9)),
    "batch_norm": ({"B": 2, "H": 3, "C": 4}, (2, 4, 3, 3)),
    "layer_norm": ({"B": 2, "M": 3, "N": 8}, (2, 3, 8)),
    "dropout": ({"B": 2, "M": 3, "N": 8, "p": 0.5}, (2, 3, 8)),
    "relu": ({"M": 3, "N": 5}, (3, 5)), "gelu": ({"M": 3, "N": 5}, (3, 5)), "tanh": ({"M": 3, "N": 5}, (3, 5)),
    "sigmoid": ({"M": 3, "N": 5}, (3, 5)), "add": ({"M": 3, "N": 5}, (3, 5)), "mul": ({"M": 3, "N": 5}, (3, 5)),
    "softmax": ({"M": 3, "N": 5}, (3, 5)),
    "concat": ({"M": 3, "N": 5, "K": 3}, (3, 15)),
    "memcpy": ({"M": 3, "N": 5}, (3, 5)),
    "transpose": ({"B": 2, "M": 3, "N": 5}, (2, 5, 3)),
    "tril": ({"B": 2, "M": 5, "diag": 0}, (2, 10)),
    "embedding_lookup": ({"B": 8, "E": [50, 20], "D": [4, 8], "L": [3.0, 1.0]}, (8, 12)),
    "embedding": ({"V": 50, "D": 8, "N": 12}, (12, 8)),
    **{name: ({"M": 3, "N": 5}, (3, 5)) for name in ("sqrt", "div", "add_", "mul_", "div_", "lerp_", "addcmul_",
                                                     "addcdiv_", "zero_", "fill_")},
}
FAST = TimerSettings(warmup=1, min_reps=2, max_reps=3, min_time_us=0, cold_min_reps=2, cold_max_reps=2)


def test_every_registered_op_is_covered():
    assert set(catalogue.load()) == set(TINY)


@pytest.mark.parametrize("name", sorted(TINY))
def test_tiny_forward_and_backward(name):
    spec = catalogue.get(name)
    given, shape = TINY[name]
    config = spec.check(given)
    for implementation in spec.implementations:
        ctx = BuildContext(torch.device("cpu"), seed=3, implementation=implementation)
        built = spec.build(config, ctx)
        out = built.fwd()
        assert tuple(out.shape) == shape and torch.isfinite(out).all()
        assert all(isinstance(v, (int, float, list)) for v in built.params.values())
        if "bwd" not in spec.passes:
            assert built.bwd is None
            continue
        if name == "embedding_lookup":
            before = built.fwd().detach().clone()
            built.bwd()
            assert not torch.equal(built.fwd().detach(), before)  # the fused optimizer updated the rows
            assert [s["table_index"] for s in built.stats] == [0, 1]
            assert built.params["T"] == 2 and len(built.params["L"]) == 2
        else:
            grads = built.bwd()
            assert all(torch.isfinite(g).all() for g in grads)
            assert [tuple(g.shape) for g in grads][0] == tuple(_first_input_shape(name, config))
        assert time_cpu(built.bwd, FAST).repetitions >= 2
    assert time_cpu(built.fwd, FAST).median_us > 0


def _first_input_shape(name, c):
    if name == "fully_connected":
        return (c["M"], c["K"])
    if name == "bmm":
        return (c["B"], c["M"], c["K"])
    if name == "conv2d":
        side = c["H"] - 2 * c["pad"]
        return (c["B"], c["IC"], side, side)
    if name == "conv1d":
        return (c["B"], c["IC"], c["L"])
    if name == "batch_norm":
        return (c["B"], c["C"], c["H"], c["H"])
    if name in ("layer_norm", "dropout", "transpose"):
        return (c["B"], c["M"], c["N"])
    if name == "tril":
        return (c["B"], c["M"], c["N"])
    if name == "embedding":
        return (c["V"], c["D"])
    return (c["M"], c["N"])


def test_values_are_right_for_a_few_ops():
    ctx = BuildContext(torch.device("cpu"), seed=1)
    tril = catalogue.get("tril")
    built = tril.build(tril.check({"B": 1, "M": 4, "diag": 1}), ctx)
    assert built.fwd().shape == (1, 10)  # with the diagonal: 4 * 5 / 2
    fc = catalogue.get("fully_connected")
    out = fc.build(fc.check({"M": 2, "N": 3, "K": 4}), ctx).fwd()
    x, w, b = ctx.rand(2, 4), ctx.rand(3, 4), ctx.rand(3)  # the same seeded values the builder drew
    torch.testing.assert_close(out, x @ w.T + b)
