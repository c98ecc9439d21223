"""Element-wise ops on x[M, N]: relu, gelu, tanh, sigmoid, add (x + y), mul (x * y), softmax over N (roofline
ops, params M, N) and dropout on x[B, M, N] with probability p (ML-modelled, params B, M, N, p).

Per-element (flops, 4-byte accesses) follow method.md section 3; they only bound the grids here."""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from collectors.ops.registry import Axis, BuildContext, Built, OpSpec, autograd_pair, register

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
