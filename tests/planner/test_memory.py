"""Memory per GPU: weights, gradients and optimizer state against closed forms; configurations that do not fit."""
import numpy as np
import pytest

from planner.candidates import Candidates
from planner.evaluate import evaluate
from planner.costs import saved_bytes
from planner.memory import layer_params, stage_params
from planner.strategies import build
from planner.model import PRESETS, Transformer
from planner.search import search

# vocab a multiple of 128·t so Megatron's padding adds nothing
GPT = Transformer(name="gpt", seq_len=1024, hidden=1024, heads=16, layers=8, vocab=1024 * 50)


def _cands(**dims):
    dims.setdefault("nmb", 1)
    dims.setdefault("mb", 1)
    return Candidates.from_columns("1d", **dims)


def test_single_gpu_holds_16_bytes_per_parameter(planner_fw, a100):
    result = evaluate(GPT, a100, _cands(t1=[1], pp=[1], dp=[1]), planner_fw)
    P = GPT.total_params()
    assert result.memory["weights"][0] == 2 * P
    assert result.memory["gradients"][0] == 2 * P
    assert result.memory["optimizer"][0] == 12 * P
    assert result.memory["total"][0] == pytest.approx(16 * P + result.memory["activations"][0])


def test_tensor_and_pipeline_sharding_of_weights(planner_fw):
    t, pp, h, L, V, s = 4, 2, 1024, 8, 1024 * 50, 1024
    c = _cands(t1=[t], pp=[pp], dp=[1])
    per_layer = (12 * h * h + 7 * h) / t + 6 * h          # linears and column biases split, norms and row biases not
    assert layer_params(GPT, c)[0] == per_layer
    params = stage_params(GPT, c, planner_fw)
    assert params.first[0] == L // pp * per_layer + V * h / t + s * h
    assert params.last[0] == L // pp * per_layer + V * h / t + 2 * h   # tied head copy + final norm


def test_distributed_optimizer_shards_the_state(planner_fw, a100):
    dp = 8
    plain, dist = evaluate(GPT, a100, _cands(t1=[1, 1], pp=[1, 1], dp=[dp, dp], dist_opt=[0, 1]), planner_fw).memory[
        "optimizer"]
    assert dist == pytest.approx(plain / dp)


def test_full_recomputation_keeps_only_layer_inputs(planner_fw, a100):
    c = _cands(t1=[1, 1], pp=[1, 1], dp=[1, 1], mb=[8, 8], recompute=[0, 2])
    result = evaluate(GPT, a100, c, planner_fw)
    costs = build(GPT, c.take(np.array([0])), planner_fw)
    everything, layer_input = saved_bytes(costs.fwd)[0], costs.layer_input[0]
    assert layer_input == 2 * 8 * 1024 * 1024 / 1          # s·b·h bf16 values (sequence parallel over t = 1)
    saved = result.memory["activations"][0] - result.memory["activations"][1]
    # every layer keeps its input instead of everything, and one layer is rebuilt at a time during backward
    assert saved == pytest.approx(GPT.layers * (everything - layer_input) - everything)
    assert result.time[1] > result.time[0] * 1.15           # the forward pass runs twice


def test_gpt3_175b_does_not_fit_on_eight_a100s(planner_fw, a100):
    model = PRESETS["gpt3-175b"]
    result = evaluate(model, a100, _cands(t1=[8], pp=[1], dp=[1]), planner_fw)
    # 175e9 parameters × 16 bytes / 8 GPUs = 350 GB per GPU
    assert result.memory["total"][0] > 16 * 174e9 / 8
    assert not result.fits[0]
    found = search(model, a100, 8, 8, fw=planner_fw, progress=False)
    assert found.top.empty and found.feasible == 0 and found.evaluated > 0
    assert found.min_memory_bytes > a100.hbm_bytes


def test_fits_follows_the_usable_capacity(planner_fw, a100):
    import dataclasses
    result = evaluate(GPT, a100, _cands(t1=[1], pp=[1], dp=[1]), planner_fw)
    need = result.memory["total"][0]
    roomy = dataclasses.replace(a100, hbm_gb=need / 1e9 / 0.9 * 1.01)
    tight = dataclasses.replace(a100, hbm_gb=need / 1e9 / 0.9 * 0.99)
    assert evaluate(GPT, roomy, _cands(t1=[1], pp=[1], dp=[1]), planner_fw).fits[0]
    assert not evaluate(GPT, tight, _cands(t1=[1], pp=[1], dp=[1]), planner_fw).fits[0]
    assert np.isfinite(need)
