"""Per-layer FLOPs and activation bytes against closed forms (GPT: 24·b·s·h² + 4·b·s²·h per layer forward)."""
import dataclasses

import numpy as np
import pytest

from planner import strategies
from planner.candidates import FRAMEWORKS, Candidates
from planner.costs import matrix_flops, saved_bytes
from planner.model import Transformer

GPT = Transformer(name="gpt", seq_len=1024, hidden=2048, heads=16, layers=4, vocab=51200)


def _layer(strategy, fw, model=GPT, **dims):
    dims.setdefault("pp", 1)
    dims.setdefault("dp", 1)
    dims.setdefault("nmb", 1)
    return strategies.build(model, Candidates.from_columns(strategy, **dims), fw)


def _gpt_fwd(b, s, h):
    return 24 * b * s * h * h + 4 * b * s * s * h


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("b", [1, 4])
def test_forward_flops_of_a_gpt_layer(flash, b):
    fw = dataclasses.replace(FRAMEWORKS["planner"], flash_attention=flash)
    model = dataclasses.replace(GPT, causal=False)      # the closed form counts the full s×s attention
    costs = _layer("1d", fw, model, t1=[1], mb=[b])
    assert matrix_flops(costs.fwd)[0] == pytest.approx(_gpt_fwd(b, 1024, 2048), rel=1e-12)


def test_backward_is_twice_forward_and_causal_flash_halves_attention():
    unfused = _layer("1d", FRAMEWORKS["megatron-deepspeed"], t1=[1], mb=[2])
    assert matrix_flops(unfused.bwd)[0] == pytest.approx(2 * matrix_flops(unfused.fwd)[0], rel=1e-12)
    causal = _layer("1d", FRAMEWORKS["planner"], t1=[1], mb=[2])
    b, s, h = 2, 1024, 2048
    assert matrix_flops(causal.fwd)[0] == pytest.approx(24 * b * s * h * h + 2 * b * s * s * h, rel=1e-12)


@pytest.mark.parametrize("strategy, dims", [
    ("1d", {"t1": [4]}), ("context", {"t1": [2], "t2": [4]}), ("summa", {"t1": [4], "t2": [2], "panels": [8]})])
def test_each_gpu_does_its_share(strategy, dims):
    fw = dataclasses.replace(FRAMEWORKS["planner"], flash_attention=False)
    gpus = np.prod([v[0] for k, v in dims.items() if k in ("t1", "t2")])
    costs = _layer(strategy, fw, mb=[2], **dims)
    assert matrix_flops(costs.fwd)[0] * gpus == pytest.approx(_gpt_fwd(2, 1024, 2048), rel=1e-12)
    assert matrix_flops(costs.bwd)[0] * gpus == pytest.approx(2 * _gpt_fwd(2, 1024, 2048), rel=1e-12)


def test_gqa_and_gated_mlp_change_the_linears():
    model = Transformer(name="gqa", seq_len=512, hidden=1024, heads=16, kv_heads=4, layers=2, vocab=1024,
                        ffn_hidden=2816, gated_mlp=True, causal=False)
    fw = dataclasses.replace(FRAMEWORKS["planner"], flash_attention=False)
    b, s, h, d = 1, 512, 1024, 64
    linears = 2 * b * s * (h * (16 + 8) * d + h * h + h * 2 * 2816 + 2816 * h)
    assert matrix_flops(_layer("1d", fw, model, t1=[1], mb=[b]).fwd)[0] == pytest.approx(
        linears + 4 * b * s * s * h, rel=1e-12)


@pytest.mark.parametrize("t, sp", [(1, False), (4, True), (4, False)])
def test_activation_bytes_match_korthikanti(t, sp):
    """Reducing Activation Recomputation (Korthikanti et al. 2022): s·b·h·(34 + 5·a·s/h) per layer without
    parallelism; 34/t + 5as/(ht) with sequence parallelism; 10 + 24/t + 5as/(ht) without it."""
    fw = dataclasses.replace(FRAMEWORKS["megatron-deepspeed"], sequence_parallel=sp)
    b, s, h, a = 2, 1024, 2048, 16
    costs = _layer("1d", fw, t1=[t], mb=[b])
    core = 5 * a * s / (h * t)
    expected = s * b * h * ((34 / t if sp or t == 1 else 10 + 24 / t) + core)
    assert saved_bytes(costs.fwd)[0] == pytest.approx(expected, rel=1e-12)
    assert saved_bytes(costs.fwd, attn_core=False)[0] == pytest.approx(expected - s * b * h * core, rel=1e-12)


def test_tensor_parallel_communication_volume():
    """1D Megatron: two all-reduces of s·b·h elements forward, two backward (or all-gather + reduce-scatter pairs)."""
    for sp, kinds in ((False, {"all_reduce"}), (True, {"all_gather", "reduce_scatter"})):
        fw = dataclasses.replace(FRAMEWORKS["planner"], sequence_parallel=sp)
        costs = _layer("1d", fw, t1=[8], mb=[1])
        for steps in (costs.fwd, costs.bwd):
            comms = [c for c in steps if hasattr(c, "dim")]
            assert {c.kind for c in comms} == kinds
            assert sum(np.asarray(c.nbytes).item() for c in comms) == len(comms) * 2 * 1024 * 2048
            assert len(comms) == (2 if not sp else 4)
