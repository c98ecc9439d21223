"""Normalisations in training mode: batch_norm (x[B, C, H, H], ``F.batch_norm`` with affine weights and running
statistics) and layer_norm (x[B, M, N] normalised over N, affine). Params (method.md section 3): batch_norm B, H, C;
layer_norm B, M, N. Sizes in elements."""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from collectors.ops.catalogue import Axis, BuildContext, Built, OpSpec, autograd_pair, register


def _bn_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["B"], p["C"], p["H"], p["H"], requires_grad=True)
    w = torch.ones(p["C"], device=ctx.device, dtype=ctx.dtype, requires_grad=True)
    b = torch.zeros(p["C"], device=ctx.device, dtype=ctx.dtype, requires_grad=True)
    mean = torch.zeros(p["C"], device=ctx.device, dtype=ctx.dtype)
    var = torch.ones(p["C"], device=ctx.device, dtype=ctx.dtype)
    return autograd_pair(lambda: F.batch_norm(x, mean, var, w, b, training=True), (x, w, b), p, ctx.seed)


def _ln_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["B"], p["M"], p["N"], requires_grad=True)
    w = torch.ones(p["N"], device=ctx.device, dtype=ctx.dtype, requires_grad=True)
    b = torch.zeros(p["N"], device=ctx.device, dtype=ctx.dtype, requires_grad=True)
    return autograd_pair(lambda: F.layer_norm(x, (p["N"],), w, b), (x, w, b), p, ctx.seed)


def _bn_elements(p: dict[str, Any]) -> float:
    return p["B"] * p["C"] * p["H"] ** 2


def _ln_elements(p: dict[str, Any]) -> float:
    return p["B"] * p["M"] * p["N"]


register(OpSpec(
    name="batch_norm", family="norm",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128), (32, 128, 256), 1, 512),
          Axis("H", (4, 7, 8, 14, 16, 28, 32, 56, 64, 112), (56, 112, 224), 1, 256),
          Axis("C", (8, 16, 32, 64, 96, 128, 256, 512, 1024), (64, 256, 1024), 1, 2048)),
    build=_bn_build, flops=lambda p: 8.0 * _bn_elements(p), bytes_moved=lambda p: 4.0 * 3 * _bn_elements(p),
    memory=lambda p: 4.0 * 5 * _bn_elements(p)))

register(OpSpec(
    name="layer_norm", family="norm",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128), (16, 64, 256), 1, 512),
          Axis("M", (1, 16, 32, 64, 128, 256, 512, 1024), (512, 1024, 2048), 1, 4096),
          Axis("N", (32, 64, 128, 256, 512, 768, 1024, 2048, 4096), (1024, 4096, 8192), 8, 16384)),
    build=_ln_build, flops=lambda p: 8.0 * _ln_elements(p), bytes_moved=lambda p: 4.0 * 3 * _ln_elements(p),
    memory=lambda p: 4.0 * 5 * _ln_elements(p)))
