"""Matrix products: fully_connected (``F.linear`` = addmm, x[M,K] · W[N,K]^T + b) and bmm (x[B,M,K] · y[B,K,N]).

Params (method.md section 3): B, M, N, K (B = 1 for fully_connected). Sizes in elements, fp32 by default.
"""
from __future__ import annotations

from typing import Any

import torch.nn.functional as F

from collectors.ops.catalogue import Axis, BuildContext, Built, OpSpec, autograd_pair, register

_SIZES = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
_ROWS = (1, 4, 16, 32, 64, 100, 128, 256, 512, 1000, 1024, 2048, 4096, 8192)
_LARGE = (512, 1024, 2048, 4096, 8192, 16384)


def _fc_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["M"], p["K"], requires_grad=True)
    w = ctx.rand(p["N"], p["K"], requires_grad=True)
    b = ctx.rand(p["N"], requires_grad=True)
    return autograd_pair(lambda: F.linear(x, w, b), (x, w, b), p, ctx.seed)


def _bmm_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["B"], p["M"], p["K"], requires_grad=True)
    y = ctx.rand(p["B"], p["K"], p["N"], requires_grad=True)
    return autograd_pair(lambda: x.bmm(y), (x, y), p, ctx.seed)


def _flops(p: dict[str, Any]) -> float:
    return 2.0 * p["B"] * p["M"] * p["N"] * p["K"]


def _elements(p: dict[str, Any]) -> float:
    return p["B"] * (p["M"] * p["K"] + p["K"] * p["N"] + p["M"] * p["N"]) + p["N"]


register(OpSpec(
    name="fully_connected", family="gemm",
    axes=(Axis("M", _ROWS, (1, 64, 512, 2048, 8192, 16384), 1, 16384),
          Axis("N", _SIZES, _LARGE, 16, 16384),
          Axis("K", _SIZES, _LARGE, 16, 16384)),
    fixed={"B": 1}, build=_fc_build, flops=_flops,
    bytes_moved=lambda p: 4.0 * _elements(p), memory=lambda p: 4.0 * 2.5 * _elements(p)))

register(OpSpec(
    name="bmm", family="gemm",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), (1, 8, 64, 512, 2048), 1, 4096),
          Axis("M", (8, 16, 32, 64, 100, 128, 256, 512, 1024), (64, 256, 1024, 4096), 1, 4096),
          Axis("N", (8, 16, 32, 64, 128, 200, 256, 512, 1024), (64, 256, 1024, 4096), 1, 4096),
          Axis("K", (8, 16, 32, 64, 128, 256, 300, 512, 1024), (64, 256, 1024, 4096), 1, 4096)),
    build=_bmm_build, flops=_flops,
    bytes_moved=lambda p: 4.0 * _elements(p), memory=lambda p: 4.0 * 2.5 * _elements(p)))
