"""The dense embedding (op 'embedding'): ``F.embedding(idx, W)`` of N indices into a table W[V, D], as the
transformers' token and position embeddings run it. Forward gathers N rows (out [N, D]); backward is the dense
gradient of W: a zeroed [V, D] tensor into which the N output-gradient rows are added (on a CPU the zeroing, and
with glibc's mmap on, above its 32 MiB threshold, the page faults of that fresh buffer and its release, dominate for
big V x D; pmdb's allocator settings turn mmap off).

Params V, D, N (elements); indices uniform over [0, V) (seeded). ML-modelled: the time is not one bytes term but
the sum of a V x D part (zeroing, page faults: backward only) and an N x D part (gathers or scattered adds whose
cost depends on whether the table fits the cache), with a step at the mmap threshold; a roofline with one
efficiency per op cannot hold both, a model over (V, D, N) can.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from collectors.ops.listed import listed_configs
from collectors.ops.catalogue import Axis, BuildContext, Built, OpSpec, autograd_pair, register

# vocabularies and position tables of the transformer workloads (token type 2, positions 512-2048, bert 30522,
# llama/xlnet 32000, gpt2 50257) and their hidden sizes
_V = (2, 512, 1024, 2048, 8192, 30522, 32000, 50257)
_D = (64, 128, 256, 512, 768, 1024)
_N = (64, 256, 512, 1024, 2048, 4096, 8192)
_LARGE = [{"V": v, "D": d, "N": n} for v in (50257, 131072, 262144) for d in (1024, 2048) for n in (8192, 32768)]
_RANGES = {"V": (2, 262144), "D": (8, 2048), "N": (1, 32768)}
DEFAULT_COUNT = 320


def _draw(rng: np.random.Generator) -> dict[str, int]:
    """Log-uniform V, D, N within _RANGES."""
    return {k: int(round(np.exp(rng.uniform(np.log(lo), np.log(hi))))) for k, (lo, hi) in _RANGES.items()}


def _build(p: dict[str, Any], ctx: BuildContext) -> Built:
    weight = ctx.rand(p["V"], p["D"], requires_grad=True)
    gen = torch.Generator(device="cpu").manual_seed(ctx.seed + 2)
    indices = torch.randint(0, p["V"], (p["N"],), generator=gen).to(ctx.device)
    return autograd_pair(lambda: F.embedding(indices, weight), (weight,), p, ctx.seed, keep=(indices,))


def _flops(p: dict[str, Any]) -> float:
    return float(p["N"] * p["D"])


def _bytes_moved(p: dict[str, Any]) -> float:
    """Forward: read N rows, write them, read N int64 indices."""
    return 4.0 * 2 * p["N"] * p["D"] + 8.0 * p["N"]


def _memory(p: dict[str, Any]) -> float:
    """Table and its dense gradient, output and output gradient, indices."""
    return 4.0 * (2 * p["V"] * p["D"] + 2 * p["N"] * p["D"]) + 8.0 * p["N"]


register(OpSpec(
    name="embedding", family="embedding", default_count=DEFAULT_COUNT,
    axes=tuple(Axis(k, (), (), lo, hi) for k, (lo, hi) in _RANGES.items()),
    build=_build, flops=_flops, bytes_moved=_bytes_moved, memory=_memory,
    make_configs=listed_configs([{"V": v, "D": d, "N": n} for v in _V for d in _D for n in _N], _LARGE, _draw)))
