"""Matrix products: fully_connected (``F.linear`` = addmm, x[M,K] · W[N,K]^T + b) and bmm (x[B,M,K] · y[B,K,N]).

Params (method.md section 3): B, M, N, K (B = 1 for fully_connected). Sizes in elements, fp32 by default.

bmm's operands may be stored transposed (:data:`LAYOUT`: ``AT`` = 1, x is a [B,K,M] tensor's transposed view;
``BT`` = 1, y is a [B,N,K] tensor's; absent = 0, row-major, so the keys of configs measured before are unchanged).
A traced bmm carries the layout its execution trace recorded (:mod:`pmdb.traces.layout`): on a CPU the layout can
cost several times the time of the same shape (DLRM's interaction, z · z^T on [256, 7, 64]: ~5x on the 48 MiB-L3
Intel host, 2026-11-29). Every sweep measures a share of its bmm shapes in each transposed layout.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np
import torch
import torch.nn.functional as F

from collectors.ops.catalogue import (QUICK_COUNT, Axis, BuildContext, Built, OpSpec, OptionalParam, autograd_pair,
                                      register, thin, with_optional)
from pmdb.traces.layout import LAYOUT

LAYOUT_SHARE = 6        # one in LAYOUT_SHARE of a sweep's bmm configs has AT = 1, as many BT = 1
# AT / BT of a bmm config: 1 where that operand is stored transposed; 0 (row-major) is left out of the config
_LAYOUT_FLAG = OptionalParam(lambda value: value in (0, 1), "0 or 1: operand stored row-major or transposed",
                             stored=int)   # 1.0 from a trace is the config key's 1

_SIZES = (16, 32, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)
_ROWS = (1, 4, 16, 32, 64, 100, 128, 256, 512, 1000, 1024, 2048, 4096, 8192)
_LARGE = (512, 1024, 2048, 4096, 8192, 16384)


def _fc_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["M"], p["K"], requires_grad=True)
    w = ctx.rand(p["N"], p["K"], requires_grad=True)
    b = ctx.rand(p["N"], requires_grad=True)
    return autograd_pair(lambda: F.linear(x, w, b), (x, w, b), p, ctx.seed)


def _operand(ctx: BuildContext, batch: int, rows: int, cols: int, transposed: bool) -> torch.Tensor:
    """A [batch, rows, cols] leaf: row-major, or the transposed view of a [batch, cols, rows] tensor."""
    if not transposed:
        return ctx.rand(batch, rows, cols, requires_grad=True)
    return ctx.rand(batch, cols, rows).transpose(1, 2).detach().requires_grad_(True)


def _bmm_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = _operand(ctx, p["B"], p["M"], p["K"], bool(p.get("AT", 0)))
    y = _operand(ctx, p["B"], p["K"], p["N"], bool(p.get("BT", 0)))
    return autograd_pair(lambda: x.bmm(y), (x, y), p, ctx.seed)


def _bmm_configs(spec: OpSpec, sweep: str, rng: np.random.Generator, sample: int, **_: Any) -> list[dict[str, Any]]:
    """A sweep's bmm configs: as many as any op's (QUICK_COUNT, ``default_count``, ``sample``; the large grid
    whole), one in :data:`LAYOUT_SHARE` of them a row-major shape of the sweep again with AT = 1, as many with
    BT = 1 (seeded), the rest row-major."""
    if sweep == "large":
        plain = spec.grid("large")
        per = max(1, len(plain) // LAYOUT_SHARE)
    else:
        total = sample if sweep == "random" else QUICK_COUNT if sweep == "quick" else spec.default_count
        per = total // LAYOUT_SHARE
        rows = total - len(LAYOUT) * per
        plain = spec.random(rows, rng) if sweep == "random" else thin(spec.grid("default"), rows)
    chosen = thin(plain, per, seed=1)
    return plain + [{**c, name: 1} for name in LAYOUT for c in chosen]


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

_BMM = register(OpSpec(
    name="bmm", family="gemm",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), (1, 8, 64, 512, 2048), 1, 4096),
          Axis("M", (8, 16, 32, 64, 100, 128, 256, 512, 1024), (64, 256, 1024, 4096), 1, 4096),
          Axis("N", (8, 16, 32, 64, 128, 200, 256, 512, 1024), (64, 256, 1024, 4096), 1, 4096),
          Axis("K", (8, 16, 32, 64, 128, 256, 300, 512, 1024), (64, 256, 1024, 4096), 1, 4096)),
    build=_bmm_build, flops=_flops,
    bytes_moved=lambda p: 4.0 * _elements(p), memory=lambda p: 4.0 * 2.5 * _elements(p)))
_BMM.make_configs = _bmm_configs
_BMM.check_config = with_optional(replace(_BMM, make_configs=None), {name: _LAYOUT_FLAG for name in LAYOUT})
