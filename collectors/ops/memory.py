"""Data-movement ops: concat (K tensors [M, N] joined along dim 1; roofline), memcpy (a tensor copy [M, N] on CPU;
host-to-device forward and device-to-host backward on CUDA; roofline), transpose (x[B, M, N] -> [B, N, M] made
contiguous; params B, M, N) and tril (the DLRM interaction index: the lower triangle of Z[B, M, N=M], with the
diagonal when diag = 1; params B, M, N, diag). Sizes in elements."""
from __future__ import annotations

from typing import Any

import torch

from collectors.ops.elementwise import ROOFLINE_COUNT
from collectors.ops.catalogue import Axis, BuildContext, Built, OpSpec, autograd_pair, register


def _concat_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    parts = [ctx.rand(p["M"], p["N"], requires_grad=True) for _ in range(p["K"])]
    return autograd_pair(lambda: torch.cat(parts, dim=1), parts, p, ctx.seed)


register(OpSpec(
    name="concat", family="memory", model="roofline", default_count=ROOFLINE_COUNT,
    axes=(Axis("M", (1, 16, 64, 256, 1024, 4096, 16384), (16384, 65536), 1, 65536),
          Axis("N", (16, 64, 128, 512, 1024, 4096), (1024, 4096), 1, 8192),
          Axis("K", (2, 3, 4, 8, 16), (2, 8, 27), 2, 32)),
    fixed={"dim": 1}, build=_concat_build, flops=lambda p: 0.0,
    bytes_moved=lambda p: 4.0 * 2 * p["M"] * p["N"] * p["K"], memory=lambda p: 4.0 * 4 * p["M"] * p["N"] * p["K"]))


def _memcpy_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    if ctx.device.type == "cuda":
        host = torch.rand(p["M"], p["N"], dtype=ctx.dtype).pin_memory()
        dev = torch.empty_like(host, device=ctx.device)
        back = torch.empty_like(host).pin_memory()
        return Built(lambda: dev.copy_(host, non_blocking=True), lambda: back.copy_(dev, non_blocking=True), p,
                     keep=(host, dev, back))
    src = ctx.rand(p["M"], p["N"])
    dst = torch.empty_like(src)
    return Built(lambda: dst.copy_(src), None, p, keep=(src, dst))


register(OpSpec(
    name="memcpy", family="memory", model="roofline", default_count=ROOFLINE_COUNT, passes=("fwd",), cuda_passes=("fwd", "bwd"),
    axes=(Axis("M", (1, 16, 64, 256, 1024, 4096, 16384, 65536), (65536, 262144), 1, 262144),
          Axis("N", (16, 64, 256, 1024, 4096), (1024, 4096), 1, 8192)),
    build=_memcpy_build, flops=lambda p: 0.0, bytes_moved=lambda p: 4.0 * 2 * p["M"] * p["N"],
    memory=lambda p: 4.0 * 3 * p["M"] * p["N"]))


def _transpose_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(p["B"], p["M"], p["N"], requires_grad=True)
    return autograd_pair(lambda: x.transpose(1, 2).contiguous(), (x,), p, ctx.seed)


register(OpSpec(
    name="transpose", family="memory",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128, 256), (64, 256, 1024), 1, 1024),
          Axis("M", (8, 16, 32, 64, 100, 128, 256, 512, 1024, 2048), (512, 2048, 4096), 1, 8192),
          Axis("N", (8, 16, 32, 64, 128, 200, 256, 512, 1024, 2048), (512, 2048, 4096), 1, 8192)),
    build=_transpose_build, flops=lambda p: 0.0, bytes_moved=lambda p: 4.0 * 2 * p["B"] * p["M"] * p["N"],
    memory=lambda p: 4.0 * 4 * p["B"] * p["M"] * p["N"]))


def _tril_normalize(c: dict[str, Any]) -> dict[str, Any] | None:
    c = {**c, "N": c["M"], "diag": int(bool(c["diag"]))}
    return c if c["M"] >= 2 and c["B"] >= 1 else None


def _tril_count(p: dict[str, Any]) -> int:
    return p["M"] * (p["M"] + 1) // 2 if p["diag"] else p["M"] * (p["M"] - 1) // 2


def _tril_build(p: dict[str, Any], ctx: BuildContext) -> Built:
    z = ctx.rand(p["B"], p["M"], p["N"], requires_grad=True)
    li, lj = torch.tril_indices(p["M"], p["N"], offset=0 if p["diag"] else -1, device=ctx.device)
    return autograd_pair(lambda: z[:, li, lj], (z,), p, ctx.seed, keep=(li, lj))


register(OpSpec(
    name="tril", family="memory",
    axes=(Axis("B", (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192), (8192, 32768, 65536), 1, 65536),
          Axis("M", (2, 3, 4, 5, 8, 9, 12, 16, 17, 20, 24, 27, 32, 40, 48, 64, 80, 100, 128), (32, 64, 128, 256), 2, 256),
          Axis("diag", (0, 1), (0, 1), kind="choice")),
    build=_tril_build, normalize=_tril_normalize, flops=lambda p: 0.0,
    bytes_moved=lambda p: 4.0 * 3 * p["B"] * _tril_count(p),
    memory=lambda p: 4.0 * (3 * p["B"] * p["M"] * p["N"] + 2 * p["B"] * _tril_count(p))))
