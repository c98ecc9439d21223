"""Convolutions: conv2d (square input and kernel, 'same'-style padding) and conv1d (kernel width 3, padding 1).

conv2d params (method.md section 3): B, H (input side + 2*pad), IC, OC, stride, dilation, FH, FW, is_depthwise
(groups = IC = OC), plus pad. conv1d params: B, L, IC, OC, groups, plus FW (= 3). Sizes in elements.
"""
from __future__ import annotations

from typing import Any

import torch.nn.functional as F

from collectors.ops.catalogue import Axis, BuildContext, Built, OpSpec, autograd_pair, register

CONV1D_WIDTH = 3


def _conv2d_normalize(c: dict[str, Any]) -> dict[str, Any] | None:
    c = dict(c)
    c["FW"] = c.get("FW", c["FH"])
    if c["FW"] != c["FH"]:
        return None
    c["is_depthwise"] = int(bool(c["is_depthwise"]))
    if c["is_depthwise"]:
        c["OC"] = c["IC"]
    if c["FH"] == 1:
        c["dilation"] = 1  # a 1x1 kernel has nothing to dilate
    c["pad"] = c["dilation"] * (c["FH"] - 1) // 2
    span = c["dilation"] * (c["FH"] - 1) + 1
    if c["H"] - 2 * c["pad"] < 1 or c["H"] < span or min(c["B"], c["IC"], c["OC"], c["stride"], c["FH"]) < 1:
        return None
    return c


def _conv2d_out(c: dict[str, Any]) -> int:
    return (c["H"] - c["dilation"] * (c["FH"] - 1) - 1) // c["stride"] + 1


def _conv2d_elements(c: dict[str, Any]) -> float:
    groups = c["IC"] if c["is_depthwise"] else 1
    side = c["H"] - 2 * c["pad"]
    return (c["B"] * c["IC"] * side ** 2 + c["OC"] * (c["IC"] // groups) * c["FH"] * c["FW"]
            + c["B"] * c["OC"] * _conv2d_out(c) ** 2)


def _conv2d_flops(c: dict[str, Any]) -> float:
    groups = c["IC"] if c["is_depthwise"] else 1
    return 2.0 * c["B"] * c["OC"] * _conv2d_out(c) ** 2 * (c["IC"] // groups) * c["FH"] * c["FW"]


def _conv2d_build(c: dict[str, Any], ctx: BuildContext) -> Built:
    groups = c["IC"] if c["is_depthwise"] else 1
    side = c["H"] - 2 * c["pad"]
    x = ctx.rand(c["B"], c["IC"], side, side, requires_grad=True)
    w = ctx.rand(c["OC"], c["IC"] // groups, c["FH"], c["FW"], requires_grad=True)
    b = ctx.rand(c["OC"], requires_grad=True)
    return autograd_pair(lambda: F.conv2d(x, w, b, stride=c["stride"], padding=c["pad"], dilation=c["dilation"],
                                          groups=groups), (x, w, b), c, ctx.seed)


register(OpSpec(
    name="conv2d", family="conv",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64), (16, 64, 128, 256), 1, 256),
          Axis("H", (8, 14, 16, 28, 32, 56, 64, 112, 224), (56, 112, 224, 448), 4, 512),
          Axis("IC", (3, 8, 16, 32, 64, 96, 128, 256, 512), (64, 256, 512, 1024), 1, 1024),
          Axis("OC", (8, 16, 32, 64, 128, 256, 512), (64, 256, 512, 1024), 1, 1024),
          Axis("stride", (1, 2), (1, 2), kind="choice"),
          Axis("dilation", (1, 2), (1,), kind="choice", choices=(1, 1, 1, 2)),
          Axis("FH", (1, 3, 5, 7), (1, 3, 7), kind="choice"),
          Axis("is_depthwise", (0, 1), (0, 1), kind="choice", choices=(0, 0, 0, 1))),
    build=_conv2d_build, flops=_conv2d_flops, normalize=_conv2d_normalize,
    bytes_moved=lambda c: 4.0 * _conv2d_elements(c), memory=lambda c: 4.0 * 2.5 * _conv2d_elements(c)))


def _conv1d_normalize(c: dict[str, Any]) -> dict[str, Any] | None:
    c = {**c, "FW": CONV1D_WIDTH}
    if min(c["B"], c["L"], c["IC"], c["OC"], c["groups"]) < 1 or c["IC"] % c["groups"] or c["OC"] % c["groups"]:
        return None
    return c


def _conv1d_elements(c: dict[str, Any]) -> float:
    return c["B"] * c["L"] * (c["IC"] + c["OC"]) + c["OC"] * (c["IC"] // c["groups"]) * CONV1D_WIDTH


def _conv1d_build(c: dict[str, Any], ctx: BuildContext) -> Built:
    x = ctx.rand(c["B"], c["IC"], c["L"], requires_grad=True)
    w = ctx.rand(c["OC"], c["IC"] // c["groups"], CONV1D_WIDTH, requires_grad=True)
    b = ctx.rand(c["OC"], requires_grad=True)
    return autograd_pair(lambda: F.conv1d(x, w, b, padding=CONV1D_WIDTH // 2, groups=c["groups"]), (x, w, b), c,
                         ctx.seed)


register(OpSpec(
    name="conv1d", family="conv",
    axes=(Axis("B", (1, 2, 4, 8, 16, 32, 64, 128), (32, 128, 512), 1, 1024),
          Axis("L", (16, 32, 64, 128, 256, 512, 1024, 2048, 4096), (1024, 4096, 16384), 4, 32768),
          Axis("IC", (4, 8, 16, 32, 64, 128, 256, 512), (128, 512, 1024), 1, 1024),
          Axis("OC", (4, 8, 16, 32, 64, 128, 256, 512), (128, 512, 1024), 1, 1024),
          Axis("groups", (1, 2, 4, 16), (1, 4), kind="choice", choices=(1, 1, 1, 2, 4, 8, 16))),
    build=_conv1d_build, normalize=_conv1d_normalize,
    flops=lambda c: 2.0 * c["B"] * c["L"] * c["OC"] * (c["IC"] // c["groups"]) * CONV1D_WIDTH,
    bytes_moved=lambda c: 4.0 * _conv1d_elements(c), memory=lambda c: 4.0 * 2.5 * _conv1d_elements(c)))
