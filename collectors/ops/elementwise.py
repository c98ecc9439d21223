"""Element-wise ops on x[M, N]: relu, gelu, tanh, sigmoid, add (x + y), mul (x * y), softmax over N (roofline
ops, params M, N), dropout on x[B, M, N] with probability p (ML-modelled, params B, M, N, p) and the optimizer's
per-parameter ops (roofline, params M, N, forward only): allocating sqrt (optional Z: the share of rows that are
exactly zero) and div (x / scalar), in-place add_
(x += y), mul_ / div_ (by a scalar), lerp_ (toward y), addcmul_, addcdiv_, zero_ and fill_.

Per-element (flops, 4-byte accesses) follow method.md section 3; they only bound the grids here."""
from __future__ import annotations

import itertools
import math
from dataclasses import replace
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from collectors.ops.listed import listed_configs
from collectors.ops.catalogue import (Axis, BuildContext, Built, OpSpec, OptionalParam, autograd_pair, register,
                                      with_optional)
from pmdb.traces.state_values import ZERO_SHARE, rounded

_M = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536)
_N = (16, 64, 128, 256, 1024, 4096, 16384)
_LARGE_M = (4096, 16384, 65536, 262144)
_LARGE_N = (1024, 4096, 16384)
ROOFLINE_COUNT = 32

# name -> (function of the inputs, number of inputs, flops per element, accesses per element)
_UNARY_BINARY: dict[str, tuple[Callable[..., torch.Tensor], int, float, float]] = {
    "relu": (F.relu, 1, 1, 2),
    "gelu": (F.gelu, 1, 175, 2),
    "tanh": (torch.tanh, 1, 180, 2),
    "sigmoid": (torch.sigmoid, 1, 4, 2),
    "add": (torch.add, 2, 1, 3),
    "mul": (torch.mul, 2, 1, 3),
    "softmax": (lambda x: torch.softmax(x, dim=-1), 1, 174, 2),
}


def _builder(fn: Callable[..., torch.Tensor], arity: int) -> Callable[[dict[str, Any], BuildContext], Built]:
    def build(p: dict[str, Any], ctx: BuildContext) -> Built:
        inputs = [ctx.rand(p["M"], p["N"], requires_grad=True) for _ in range(arity)]
        return autograd_pair(lambda: fn(*inputs), inputs, p, ctx.seed)
    return build


for _name, (_fn, _arity, _flops, _accesses) in _UNARY_BINARY.items():
    register(OpSpec(
        name=_name, family="elementwise", model="roofline", default_count=ROOFLINE_COUNT,
        axes=(Axis("M", _M, _LARGE_M, 1, 262144), Axis("N", _N, _LARGE_N, 1, 16384)),
        build=_builder(_fn, _arity),
        flops=lambda p, f=_flops: f * p["M"] * p["N"],
        bytes_moved=lambda p, a=_accesses: 4.0 * a * p["M"] * p["N"],
        memory=lambda p, a=_accesses: 4.0 * (2 * a + 1) * p["M"] * p["N"]))


def _dropout_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["B"], p["M"], p["N"], requires_grad=True)
    torch.manual_seed(ctx.seed)
    return autograd_pair(lambda: F.dropout(x, p["p"], training=True), (x,), p, ctx.seed)


register(OpSpec(
    name="dropout", family="elementwise",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128), (16, 64, 256), 1, 512),
          Axis("M", (1, 16, 64, 128, 256, 512, 1024), (512, 1024, 4096), 1, 4096),
          Axis("N", (16, 64, 128, 256, 512, 1024, 4096), (1024, 4096, 16384), 1, 16384),
          Axis("p", (0.1, 0.2, 0.3, 0.5, 0.7), (0.1, 0.5), 0.05, 0.9, kind="float")),
    build=_dropout_build, normalize=lambda c: c if 0 <= c["p"] < 1 else None, flops=lambda p: 2.0 * p["B"] * p["M"] * p["N"],
    bytes_moved=lambda p: 4.0 * 3 * p["B"] * p["M"] * p["N"], memory=lambda p: 4.0 * 6 * p["B"] * p["M"] * p["N"]))


# ---- the optimizer's per-parameter ops (forward only: optimizers run under no_grad) ----------------------------
# Out-of-place sqrt and div (tensor / scalar) allocate their output: with glibc's mmap on (not pmdb's default,
# collectors/workloads/allocator.py) one above the 32 MiB threshold is page-faulted in and unmapped on release (both
# inside the timed span, collectors/ops/timer.py), which in-place ops never pay. The grid reaches 16M elements (a
# 50257 x 256 token embedding is 12.9M) and is dense around 32 MiB.
_NUMELS = (16, 64, 256, 1024, 4096, 16384, 65536, 262144, 2 ** 20, 2 ** 21, 2 ** 22, 6 * 2 ** 20, 7.5 * 2 ** 20,
           2 ** 23, 12 * 2 ** 20, 2 ** 24)
_LARGE_NUMELS = (2 ** 24, 24 * 2 ** 20, 2 ** 25, 2 ** 26)
_WIDTHS = (1, 64, 256, 1024, 4096)
_MAX_NUMEL = 2 ** 26


def _shape(numel: float, width: int) -> dict[str, int]:
    n = int(min(width, numel))
    return {"M": int(numel) // n, "N": n}


def _ladder(numels: tuple[float, ...], widths: tuple[int, ...], per_size: int) -> list[dict[str, int]]:
    """``per_size`` distinct shapes [M, N] of each element count (fewer when it has fewer), the widths N taken in
    turn from ``widths``."""
    out: list[dict[str, int]] = []
    for i, numel in enumerate(numels):
        shapes = [_shape(numel, widths[(i + 2 * j) % len(widths)]) for j in range(len(widths))]
        distinct = [s for k, s in enumerate(shapes) if s not in shapes[:k]]
        out.extend(distinct[:per_size])
    return out


def _draw(rng: np.random.Generator) -> dict[str, int]:
    """A random shape: log-uniform element count in [1, 2^26], width from _WIDTHS."""
    numel = int(round(math.exp(rng.uniform(0.0, math.log(_MAX_NUMEL)))))
    return _shape(max(numel, 1), int(rng.choice(_WIDTHS)))


def _tensors(p: dict[str, Any], ctx: BuildContext, count: int) -> list[torch.Tensor]:
    """``count`` distinct seeded U(-1, 1) tensors [M, N]."""
    return [replace(ctx, seed=ctx.seed + k).rand(p["M"], p["N"]) for k in range(count)]


def _alternating(*values: float) -> Callable[[], float]:
    """The next of ``values`` at every call (in-place updates that undo each other keep the values bounded)."""
    cycle = itertools.cycle(values)
    return lambda: next(cycle)


def _sqrt(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    x.abs_()  # Adam takes the root of the (non-negative) second moment
    return lambda: torch.sqrt(x)


def _div(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: torch.div(x, 3.0)


def _add_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    alpha = _alternating(1.0, -1.0)  # x + y, then x - y: back to x
    return lambda: x.add_(y, alpha=alpha())


def _mul_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    factor = _alternating(2.0, 0.5)  # exact in binary floating point: x is restored every second call
    return lambda: x.mul_(factor())


def _div_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    divisor = _alternating(2.0, 0.5)
    return lambda: x.div_(divisor())


def _lerp_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: x.lerp_(y, 0.1)  # Adam's first moment (weight 1 - beta1): converges to the fixed y


def _addcmul_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    value = _alternating(1e-3, -1e-3)
    return lambda: x.addcmul_(y, z, value=value())


def _addcdiv_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    z.abs_().add_(0.5)  # a denominator away from zero, like sqrt(v) + eps
    value = _alternating(1e-3, -1e-3)
    return lambda: x.addcdiv_(y, z, value=value())


def _zero_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    return x.zero_


def _fill_(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Callable[[], torch.Tensor]:
    return lambda: x.fill_(0.5)


# name -> (callable maker from up to three tensors, tensors used, flops per element, accesses per element,
# whether it allocates its output)
OPTIMIZER_OPS: dict[str, tuple[Callable[..., Callable[[], torch.Tensor]], int, float, float, bool]] = {
    "sqrt": (_sqrt, 1, 1, 2, True), "div": (_div, 1, 1, 2, True),
    "add_": (_add_, 2, 1, 3, False), "mul_": (_mul_, 1, 1, 2, False), "div_": (_div_, 1, 1, 2, False),
    "lerp_": (_lerp_, 2, 3, 3, False), "addcmul_": (_addcmul_, 3, 3, 4, False),
    "addcdiv_": (_addcdiv_, 3, 3, 4, False), "zero_": (_zero_, 1, 0, 1, False), "fill_": (_fill_, 1, 0, 1, False),
}


def _optimizer_builder(make: Callable[..., Callable[[], torch.Tensor]], count: int
                       ) -> Callable[[dict[str, Any], BuildContext], Built]:
    def build(p: dict[str, Any], ctx: BuildContext) -> Built:
        tensors = _tensors(p, ctx, count)
        x, y, z = (tensors + [tensors[0]] * 2)[:3]
        return Built(make(x, y, z), None, p, keep=tuple(tensors))
    return build


# ---- sqrt on exact zeros ------------------------------------------------------------------------------------
# torch.sqrt runs several times slower on exact zeros than on other values on some hosts (4x on the AMD host: MKL's
# vector path), and Adam takes the root of a second moment whose rows stay exactly zero until a batch reaches them
# (a token embedding early in training). Its configs may carry Z, the share of rows set to exactly zero (rows, as
# in the optimizer's state; Z absent = 0: the keys of configs measured before Z existed are unchanged). The
# traced share comes from the workload's recorded optimizer state (pmdb.traces.state_values).
_ZERO_SHARES = (0.5, 0.9, 1.0)
_ZERO_NUMELS = (4096, 65536, 2 ** 20, 2 ** 22, 2 ** 23, 2 ** 24)
_ZERO_SHARE_PARAM = OptionalParam(lambda share: isinstance(share, (int, float)) and 0.0 <= share <= 1.0,
                                  "a share in [0, 1]", stored=rounded, default=0.0)


def _with_zeros(configs: list[dict[str, Any]], shares: tuple[float, ...]) -> list[dict[str, Any]]:
    return [dict(c, **{ZERO_SHARE: z}) for c in configs for z in shares]


def _sqrt_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A random shape; half the draws of 100 rows or more with a zero share uniform in (0, 1]."""
    config: dict[str, Any] = _draw(rng)
    if rng.uniform() < 0.5 and config["M"] >= 100:  # enough rows to hold the share
        config[ZERO_SHARE] = rounded(rng.uniform(0.01, 1.0))
    return config


def _sqrt_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = _tensors(p, ctx, 1)[0]
    root = _sqrt(x, x, x)
    zero_rows = int(round(float(p.get(ZERO_SHARE, 0.0)) * p["M"]))
    if zero_rows:
        gen = torch.Generator(device="cpu").manual_seed(ctx.seed + 1)
        x[torch.randperm(p["M"], generator=gen)[:zero_rows].to(x.device)] = 0.0
    params = dict(p, **{ZERO_SHARE: zero_rows / p["M"]}) if ZERO_SHARE in p else p  # the share built (whole rows)
    return Built(root, None, params, keep=(x,))


_OPTIMIZER_CONFIGS = listed_configs(_ladder(_NUMELS, _WIDTHS, 2), _ladder(_LARGE_NUMELS, (256, 4096), 2), _draw)
_SQRT_CONFIGS = listed_configs(
    _ladder(_NUMELS, _WIDTHS, 2) + _with_zeros(_ladder(_ZERO_NUMELS, (256,), 1), _ZERO_SHARES),
    _ladder(_LARGE_NUMELS, (256, 4096), 2) + _with_zeros(_ladder(_LARGE_NUMELS, (256,), 1), (0.9,)), _sqrt_draw)
for _name, (_make, _count, _flops, _accesses, _allocates) in OPTIMIZER_OPS.items():
    _is_sqrt = _name == "sqrt"
    _spec = OpSpec(
        name=_name, family="elementwise", model="roofline", passes=("fwd",),
        default_count=ROOFLINE_COUNT + (len(_ZERO_SHARES) * len(_ZERO_NUMELS) if _is_sqrt else 0),
        axes=(Axis("M", (), (), 1, _MAX_NUMEL), Axis("N", (), (), 1, 16384)),
        build=_sqrt_build if _is_sqrt else _optimizer_builder(_make, _count),
        make_configs=_SQRT_CONFIGS if _is_sqrt else _OPTIMIZER_CONFIGS,
        flops=lambda p, f=_flops: f * p["M"] * p["N"],
        bytes_moved=lambda p, a=_accesses: 4.0 * a * p["M"] * p["N"],
        memory=lambda p, c=_count, out=_allocates: 4.0 * (c + int(out)) * p["M"] * p["N"])
    if _is_sqrt:
        _spec.check_config = with_optional(replace(_spec), {ZERO_SHARE: _ZERO_SHARE_PARAM})
    register(_spec)
