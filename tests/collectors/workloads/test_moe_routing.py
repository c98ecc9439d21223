"""Mixture-of-experts layers in a shape-only capture (collectors/workloads/moe_routing.py): a Switch Transformer,
whose expert loop is data-dependent and failed on the meta device, is captured with balanced routing under its
capacity; every expert's GEMMs get the stated rows; the replacement records no op kind that a real CPU run of the
same tiny model does not; the CLI says how the experts were routed.

The fused top-k experts of transformers 5 (Mixtral, Qwen2-MoE, OLMoE, Qwen3-MoE, DeepSeek-V2/V3, GLM-4-MoE, Phi-MoE,
GraniteMoE, ERNIE-4.5-MoE, and the hybrids Qwen3-Next, MiniMax, Jamba) likewise: each expert gets ceil(tokens x
top_k / experts) rows, and transformers' own expert loop, run for real on the CPU with a router forced to balanced
choices, computes the same GEMMs, gathers and scatter-adds as the meta capture's replacement.

The ``inputs`` policy (every token alike under the recipe's all-ones inputs): transformers' own loops, run for real
on the CPU with their own routers and no forcing, compute exactly the meta capture's expert GEMMs, in eval mode for
every routed model and in a training step for the fused ones (no dropout by default); a Switch training step draws
dropout masks, a Phi-MoE one router jitter, so the policy falls back to balanced routing and says why. So it
does for the hybrids in any mode: their linear-attention or Mamba layers make the tokens differ at the routers."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import functools
import importlib
import inspect
import textwrap

import pytest
import torch

from collectors.workloads.graph_only import CaptureInfo, GraphRequest, build_model, capture, record_step
from collectors.workloads.moe_routing import (POSITION_MIXING, ROUTED, alike_rows, expert_routing, not_alike,
                                              tokens_per_expert)
from pmdb.cli.main import main

TINY_SWITCH = {"model_type": "switch_transformers", "d_model": 32, "d_ff": 48, "d_kv": 8, "num_heads": 4,
               "num_layers": 2, "num_decoder_layers": 2, "num_sparse_encoder_layers": 1,
               "num_sparse_decoder_layers": 1, "encoder_sparse_step": 2, "decoder_sparse_step": 2, "num_experts": 4,
               "expert_capacity": 3, "vocab_size": 100, "dropout_rate": 0.1, "router_jitter_noise": 0.01,
               "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
BATCH, SEQ = 2, 16
# fused top-k experts: 4 experts, 2 per token, 2 layers; hidden 32, expert intermediate INTERMEDIATE[model_type]
TOP_K_SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "num_experts_per_tok": 2, "vocab_size": 100, "bos_token_id": 0, "eos_token_id": 0, "pad_token_id": 0}
# multi-head latent attention (DeepSeek): low-rank queries and keys/values, every query head its own key/value head
MLA = {"num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
       "v_head_dim": 8}
TINY_TOP_K = {
    "mixtral": {"model_type": "mixtral", "num_local_experts": 4, "intermediate_size": 64, **TOP_K_SIZES},
    "qwen2_moe": {"model_type": "qwen2_moe", "num_experts": 4, "intermediate_size": 64, "moe_intermediate_size": 48,
                  "shared_expert_intermediate_size": 80, **TOP_K_SIZES},
    "olmoe": {"model_type": "olmoe", "num_experts": 4, "intermediate_size": 64, **TOP_K_SIZES},
    "qwen3_moe": {"model_type": "qwen3_moe", "num_experts": 4, "intermediate_size": 64, "moe_intermediate_size": 48,
                  "head_dim": 8, **TOP_K_SIZES},
    # DeepSeek's multi-head latent attention (as many key/value heads as query heads) and a shared expert; every
    # layer a MoE layer; grouped routing: 2 groups of 2 experts, the top-2 from the best group
    "deepseek_v2": {"model_type": "deepseek_v2", **TOP_K_SIZES, **MLA, "n_routed_experts": 4, "intermediate_size": 64,
                    "moe_intermediate_size": 48, "n_shared_experts": 1, "first_k_dense_replace": 0,
                    "topk_method": "group_limited_greedy", "n_group": 2, "topk_group": 1},
    "deepseek_v3": {"model_type": "deepseek_v3", **TOP_K_SIZES, **MLA, "n_routed_experts": 4, "intermediate_size": 64,
                    "moe_intermediate_size": 48, "n_shared_experts": 1, "first_k_dense_replace": 0, "n_group": 2,
                    "topk_group": 1},
    "glm4_moe": {"model_type": "glm4_moe", "n_routed_experts": 4, "intermediate_size": 64, "moe_intermediate_size": 48,
                 "n_shared_experts": 1, "first_k_dense_replace": 0, "n_group": 1, "topk_group": 1, "head_dim": 8,
                 **TOP_K_SIZES},
    "phimoe": {"model_type": "phimoe", "num_local_experts": 4, "intermediate_size": 64, **TOP_K_SIZES},
    "granitemoe": {"model_type": "granitemoe", "num_local_experts": 4, "intermediate_size": 64, **TOP_K_SIZES},
    "ernie4_5_moe": {"model_type": "ernie4_5_moe", "moe_num_experts": 4, "moe_k": 2, "intermediate_size": 64,
                     "moe_intermediate_size": 48, "moe_num_shared_experts": 1, "moe_layer_start_index": 0,
                     **TOP_K_SIZES},
    # hybrids (balanced only): every layer a MoE layer, the first one's mixer linear attention (Qwen3-Next's gated
    # delta rule of 1 key and 2 value heads of 8; MiniMax's lightning attention in blocks of 8) or Mamba (state 4,
    # no expansion), the second full attention; a shared expert beside Qwen3-Next's
    "qwen3_next": {"model_type": "qwen3_next", "num_experts": 4, "intermediate_size": 64, "moe_intermediate_size": 48,
                   "shared_expert_intermediate_size": 80, "head_dim": 8,
                   "layer_types": ["linear_attention", "full_attention"], "linear_key_head_dim": 8,
                   "linear_value_head_dim": 8, "linear_num_key_heads": 1, "linear_num_value_heads": 2, **TOP_K_SIZES},
    "minimax": {"model_type": "minimax", "num_local_experts": 4, "intermediate_size": 64, "head_dim": 8,
                "layer_types": ["linear_attention", "full_attention"], "block_size": 8, **TOP_K_SIZES},
    "jamba": {"model_type": "jamba", "num_experts": 4, "intermediate_size": 64, "expert_layer_period": 1,
              "expert_layer_offset": 0, "attn_layer_period": 2, "attn_layer_offset": 1, "mamba_d_state": 4,
              "mamba_expand": 1, **TOP_K_SIZES},
}
INTERMEDIATE = {"mixtral": 64, "qwen2_moe": 48, "olmoe": 64, "qwen3_moe": 48, "deepseek_v2": 48, "deepseek_v3": 48,
                "glm4_moe": 48, "phimoe": 64, "granitemoe": 64, "ernie4_5_moe": 48, "qwen3_next": 48, "minimax": 64,
                "jamba": 64}
# the router class of each model, forced to balanced choices for the real CPU run
ROUTERS = {"mixtral": "MixtralTopKRouter", "qwen2_moe": "Qwen2MoeTopKRouter", "olmoe": "OlmoeTopKRouter",
           "qwen3_moe": "Qwen3MoeTopKRouter", "deepseek_v2": "DeepseekV2TopkRouter",
           "deepseek_v3": "DeepseekV3TopkRouter", "glm4_moe": "Glm4MoeTopkRouter", "phimoe": "PhimoeTopKRouter",
           "granitemoe": "GraniteMoeTopKRouter", "ernie4_5_moe": "Ernie4_5_MoeTopKRouter",
           "qwen3_next": "Qwen3NextTopKRouter", "minimax": "MiniMaxTopKRouter", "jamba": "JambaTopKRouter"}
EXPERT_WORK = ("aten::linear", "aten::mm", "aten::matmul", "aten::index", "aten::index_add_", "aten::chunk")


def test_rows_per_expert_balanced_under_the_capacity():
    assert tokens_per_expert(2048, 2, 4, 64) == 128      # 1024 per sequence / 4 = 256, capped at 64, x 2 sequences
    assert tokens_per_expert(2048, 2, 4, None) == 512    # no cap: the even share
    assert tokens_per_expert(2048, 2, 4, 1000) == 512    # a cap above the share changes nothing
    assert tokens_per_expert(30, 2, 4, None) == 8        # no cap: 30 tokens over 4 experts, 8 (ceil) each
    assert tokens_per_expert(30, 2, 4, 3) == 2 * 3       # 15 per sequence over 4 experts: 4 (ceil), capped at 3


def test_rows_per_expert_of_top_k_routing():
    assert tokens_per_expert(32, 2, 4, None, top_k=2) == 16    # 64 token-expert pairs over 4 experts
    assert tokens_per_expert(60, 4, 8, None, top_k=2) == 15    # ceil(120 / 8), not per sequence: no capacity
    assert tokens_per_expert(60, 4, 8, None, top_k=3) == 23    # ceil(180 / 8)
    assert tokens_per_expert(10, 1, 4, None, top_k=4) == 10    # every expert gets every token
    assert tokens_per_expert(2048, 2, 4, 64, top_k=2) == 128   # a capacity still caps the share per sequence


def _gemm_rows(path: Path, d_in: int) -> Counter:
    """Rows of every linear / mm whose input has ``d_in`` columns, in the trace (counted per rows)."""
    rows: Counter = Counter()
    for node in json.loads(path.read_text())["nodes"]:
        if node["name"] in ("aten::linear", "aten::mm", "aten::addmm", "aten::matmul"):
            shapes = node["inputs"]["shapes"]
            first = shapes[1] if node["name"] == "aten::addmm" else shapes[0]
            if isinstance(first, list) and len(first) == 2 and first[-1] == d_in:
                rows[first[0]] += 1
    return rows


@functools.lru_cache(maxsize=4)
def _nodes(path: Path) -> list[dict[str, Any]]:
    """The nodes of a trace, read once for the checks of one test (each test writes its traces once)."""
    return json.loads(path.read_text())["nodes"]


def _aten_names(path: Path) -> set[str]:
    return {n["name"] for n in _nodes(path) if n["name"].startswith("aten::")}


def test_a_switch_transformer_is_captured_on_meta_with_balanced_experts(tmp_path):
    pytest.importorskip("transformers.models.switch_transformers")
    request = GraphRequest("tiny-switch", TINY_SWITCH, BATCH, SEQ)
    model, _, inputs = build_model(request, "meta")
    with pytest.raises((RuntimeError, NotImplementedError)):     # the data-dependent loop, as transformers has it
        record_step(model, inputs, "none", tmp_path / "plain.json")
    meta = capture(request, tmp_path / "meta.json")
    per_expert = tokens_per_expert(BATCH * SEQ, BATCH, 4, 3)
    assert per_expert == 6
    assert f"{per_expert} rows per expert" in meta.routing and "2 mixture-of-experts layers" in meta.routing
    # GEMMs with a d_ff-wide input: the experts' second GEMM (and its input gradient) at the balanced rows, the
    # dense layers' at every token; each of the 4 experts of the 2 sparse layers alike
    rows = _gemm_rows(tmp_path / "meta.json", 48)
    assert set(rows) == {per_expert, BATCH * SEQ}
    assert rows[per_expert] > 0 and rows[per_expert] % (4 * 2) == 0
    cpu = capture(request, tmp_path / "cpu.json", device="cpu")   # real weights, the model's own routing
    assert cpu.routing is None
    meta_names, cpu_names = _aten_names(tmp_path / "meta.json"), _aten_names(tmp_path / "cpu.json")
    assert {"aten::index", "aten::index_add_"} <= meta_names & cpu_names   # the experts' gather and scatter-add
    # meta's out-of-place forms where a real device calls _index_put_impl_ / scatter_ (the backward of indexing and
    # of the router's max), and one_hot's meta branch (an eq against arange): graph_only's docstring
    assert meta_names - cpu_names <= {"aten::index_put", "aten::scatter", "aten::eq"}, meta_names - cpu_names


def _collect(tmp_path: Path, capsys: Any, model_config: dict[str, Any], *extra: str) -> tuple[int, str]:
    """(exit code, stderr) of ``pmdb collect workload transformer --graph-only`` of ``model_config`` in a new
    workspace, batch BATCH, sequence SEQ, and ``extra`` options."""
    config = tmp_path / "model.json"
    config.write_text(json.dumps(model_config))
    home = tmp_path / "ws"
    assert main(["--home", str(home), "init"]) == 0
    capsys.readouterr()
    code = main(["--home", str(home), "collect", "workload", "transformer", "--graph-only", "--config", str(config),
                 "--batch-size", str(BATCH), "--seq-len", str(SEQ), *extra])
    return code, capsys.readouterr().err


def _note_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("pmdb: note", "  "))]


def test_the_cli_says_how_the_experts_were_routed(tmp_path, capsys):
    pytest.importorskip("transformers.models.switch_transformers")
    code, err = _collect(tmp_path, capsys, TINY_SWITCH)
    assert code == 0
    assert "pmdb: note: 2 mixture-of-experts layers captured with balanced routing" in err
    assert all(len(line) <= 80 for line in _note_lines(err))


def test_a_model_without_experts_is_left_as_it_is():
    model = type("M", (), {"config": type("C", (), {"model_type": "gpt2"})()})()
    with expert_routing(model, 2, 16) as note:
        assert note is None


def _gemms(path: Path) -> Counter:
    """(op, input shapes) of the experts' device work (:data:`EXPERT_WORK`) in a trace, counted."""
    return Counter((n["name"], json.dumps(n["inputs"]["shapes"])) for n in _nodes(path) if n["name"] in EXPERT_WORK)


def _top_k_request(model_type: str) -> GraphRequest:
    pytest.importorskip(ROUTED[model_type].module)
    return GraphRequest(f"tiny-{model_type}", TINY_TOP_K[model_type], BATCH, SEQ)


MetaCapture = Callable[[str], tuple[CaptureInfo, Path]]


@pytest.fixture(scope="module")
def balanced_meta(tmp_path_factory: pytest.TempPathFactory) -> MetaCapture:
    """The meta capture (note, trace) of a tiny top-k model's training step with balanced routing, made once per
    model type for the two tests below. Its router is forced to balanced choices (:func:`_balanced_router`) as in
    the real CPU run it is compared with, so that the router's own ops match; the replacement ignores the choices."""
    made: dict[str, tuple[CaptureInfo, Path]] = {}

    def meta(model_type: str) -> tuple[CaptureInfo, Path]:
        if model_type not in made:
            path = tmp_path_factory.mktemp(f"meta-{model_type}") / "meta.json"
            with pytest.MonkeyPatch.context() as patch:
                _force_balanced_router(patch, model_type)
                made[model_type] = capture(_top_k_request(model_type), path), path
        return made[model_type]
    return meta


@pytest.mark.parametrize("model_type", sorted(TINY_TOP_K))
def test_a_top_k_model_is_captured_on_meta_with_balanced_experts(tmp_path, balanced_meta, model_type):
    request = _top_k_request(model_type)
    model, _, inputs = build_model(request, "meta")
    assert model.config._experts_implementation == "eager"     # the loop, not the fused grouped_mm (bf16 only)
    with pytest.raises((RuntimeError, NotImplementedError)):     # the data-dependent loop, as transformers has it
        record_step(model, inputs, "none", tmp_path / "plain.json")
    meta, meta_trace = balanced_meta(model_type)
    rows, hidden, inner = BATCH * SEQ * 2 // 4, 32, INTERMEDIATE[model_type]
    assert rows == tokens_per_expert(BATCH * SEQ, BATCH, 4, None, 2) == 16
    assert meta.routing.startswith("2 mixture-of-experts layers captured with balanced routing (4 experts, top-2 "
                                   "per token): 16 rows per expert of 32 tokens")
    # each of the 4 experts of the 2 layers: gate_up_proj[e] on its 16 rows, then down_proj[e]
    linears = Counter(shapes for (name, shapes) in _gemms(meta_trace).elements()
                      if name == "aten::linear" and json.loads(shapes)[0][0] == rows)
    assert linears == {json.dumps([[rows, hidden], [2 * inner, hidden], []]): 4 * 2,    # no bias
                       json.dumps([[rows, inner], [hidden, inner], []]): 4 * 2}


def _loop(cls: type) -> str:
    """The source of an experts class's own forward (under transformers' ``use_experts_implementation`` wrapper)."""
    return textwrap.dedent(inspect.getsource(inspect.unwrap(cls.forward)))


def test_every_fused_entry_has_mixtral_s_expert_loop_and_a_tiny_model_here():
    """The fused replacement stands in for one loop: each ROUTED entry of that form runs it, line for line (a
    transformers upgrade that changes one fails here), and is captured by the tests below."""
    fused = {t for t, r in ROUTED.items() if r.form == "fused"}
    assert fused == set(TINY_TOP_K)
    pytest.importorskip(ROUTED["mixtral"].module)
    classes = {t: getattr(importlib.import_module(ROUTED[t].module), ROUTED[t].cls) for t in sorted(fused)}
    assert {t: _loop(c) for t, c in classes.items()} == {t: _loop(classes["mixtral"]) for t in classes}


def _balanced_router(forward):
    """A top-k router's forward whose choices are balanced: token t goes to experts (t x top_k + j) mod experts,
    j < top_k, weighted by its softmax probabilities there (the router's own logits, its own GEMM)."""
    def balanced(self, hidden_states):
        logits, _, _ = forward(self, hidden_states)
        tokens = logits.shape[0]
        index = torch.arange(tokens * self.top_k, device=logits.device).view(tokens, self.top_k) % self.num_experts
        return logits, logits.float().softmax(-1).gather(1, index).to(logits.dtype), index
    return balanced


def _force_balanced_router(patch: pytest.MonkeyPatch, model_type: str) -> None:
    """Patch the router class of ``model_type`` (:data:`ROUTERS`) to balanced choices."""
    router = getattr(importlib.import_module(ROUTED[model_type].module), ROUTERS[model_type])
    patch.setattr(router, "forward", _balanced_router(router.forward))


@pytest.mark.parametrize("model_type", sorted(TINY_TOP_K))
def test_the_real_loop_with_balanced_choices_does_the_meta_capture_s_expert_work(tmp_path, monkeypatch, balanced_meta,
                                                                                 model_type):
    """transformers' expert loop (real weights, the CPU) with its router forced to balanced choices computes the
    GEMMs, gathers and scatter-adds of the meta capture's replacement, shape for shape and count for count."""
    request = _top_k_request(model_type)
    meta, meta_trace = balanced_meta(model_type)
    _force_balanced_router(monkeypatch, model_type)
    cpu = capture(request, tmp_path / "cpu.json", device="cpu")
    assert cpu.routing is None and meta.routing
    meta_work, cpu_work = _gemms(meta_trace), _gemms(tmp_path / "cpu.json")
    assert meta_work == cpu_work, (meta_work - cpu_work, cpu_work - meta_work)
    assert sum(c for (name, _), c in meta_work.items() if name == "aten::index_add_") == 4 * 2
    meta_names, cpu_names = _aten_names(meta_trace), _aten_names(tmp_path / "cpu.json")
    # meta's out-of-place index_put / scatter_add (a real device: _index_put_impl_, scatter_add_); the replacement's
    # stand-ins for torch.where's indices (arange, zeros_like)
    assert meta_names - cpu_names <= {"aten::index_put", "aten::scatter_add", "aten::zeros_like"}, \
        meta_names - cpu_names


def test_the_cli_says_how_the_top_k_experts_were_routed(tmp_path, capsys):
    pytest.importorskip(ROUTED["mixtral"].module)
    code, err = _collect(tmp_path, capsys, TINY_TOP_K["mixtral"])
    assert code == 0
    note = " ".join(line.strip() for line in _note_lines(err))
    assert "balanced routing (4 experts, top-2 per token): 16 rows per expert of 32 tokens" in note
    assert all(len(line) <= 80 for line in _note_lines(err))


@pytest.mark.parametrize("change, message", [
    ({"num_experts_per_tok": 5}, "num_experts_per_tok is 5, more than the model's 4 experts"),
    ({"num_experts_per_tok": 0}, "num_experts_per_tok is 0; model sizes must be >= 1")])
def test_an_impossible_top_k_is_one_line(tmp_path, capsys, change, message):
    code, err = _collect(tmp_path, capsys, {**TINY_TOP_K["mixtral"], **change})
    assert code == 2
    assert err.count("pmdb: error:") == 1 and message in err and "Traceback" not in err


def _expert_linears(path: Path, hidden: int, d_ff: int) -> Counter:
    """(rows, input columns) of every linear / mm on the experts' widths (``hidden`` in or ``d_ff`` in) in the
    trace's forward-pass GEMMs, counted."""
    out: Counter = Counter()
    for node in json.loads(path.read_text())["nodes"]:
        if node["name"] in ("aten::linear", "aten::mm"):
            first = node["inputs"]["shapes"][0]
            if isinstance(first, list) and len(first) == 2 and first[-1] in (hidden, d_ff):
                out[tuple(first)] += 1
    return out


ALIKE = sorted(set(TINY_TOP_K) - set(POSITION_MIXING))   # not the hybrids: their tokens differ (the last test)


@pytest.mark.parametrize("model_type, mode", [*((t, "inference") for t in ALIKE),
                                              ("mixtral", "train"), ("switch_transformers", "inference")])
def test_alike_tokens_route_as_the_real_model_does(tmp_path, model_type, mode):
    """The recipe's all-ones inputs, real weights on the CPU, the model's own router: its expert GEMMs are the meta
    capture's under --routing inputs, shape for shape and count for count (the same top_k experts take every
    token, up to a capacity; the others none)."""
    config = TINY_SWITCH if model_type == "switch_transformers" else TINY_TOP_K[model_type]
    pytest.importorskip(ROUTED[model_type].module)
    request = GraphRequest(f"tiny-{model_type}", config, BATCH, SEQ, mode=mode, routing="inputs")
    meta = capture(request, tmp_path / "meta.json")
    capture(request, tmp_path / "cpu.json", device="cpu")
    hidden = config.get("hidden_size") or config["d_model"]
    d_ff = config.get("d_ff") or INTERMEDIATE[model_type]
    meta_gemms = _expert_linears(tmp_path / "meta.json", hidden, d_ff)
    assert meta_gemms == _expert_linears(tmp_path / "cpu.json", hidden, d_ff)
    switch = model_type == "switch_transformers"
    rows = alike_rows(BATCH * SEQ, BATCH, config["expert_capacity"]) if switch else BATCH * SEQ
    assert rows == (2 * 3 if switch else 32)
    assert "as the recipe's alike tokens route" in meta.routing and f"{1 if switch else 2} expert(s) of {rows} rows" \
        in meta.routing


def test_a_training_step_with_dropout_falls_back_to_balanced_routing(tmp_path):
    pytest.importorskip("transformers.models.switch_transformers")
    request = GraphRequest("tiny-switch", TINY_SWITCH, BATCH, SEQ, routing="inputs")
    model, _, _ = build_model(request, "meta")
    assert not_alike(model) == "the training step draws random masks or noise (dropout_rate, router_jitter_noise)"
    meta = capture(request, tmp_path / "meta.json")
    assert "balanced routing" in meta.routing and "--routing inputs does not decide it: the training step draws" \
        in meta.routing
    capture(GraphRequest("tiny-switch", TINY_SWITCH, BATCH, SEQ), tmp_path / "balanced.json")
    assert _gemm_rows(tmp_path / "meta.json", 48) == _gemm_rows(tmp_path / "balanced.json", 48)


def test_phi_moe_s_router_jitter_falls_back_to_balanced_routing_in_a_training_step():
    """Phi-MoE's router draws jitter in a training step (``router_jitter_noise``, 0.01 by default), so --routing
    inputs routes it balanced and says why; in eval mode its tokens are alike (the inference test above)."""
    pytest.importorskip(ROUTED["phimoe"].module)
    why = "the training step draws random masks or noise (router_jitter_noise)"
    train, _, _ = build_model(GraphRequest("tiny-phimoe", TINY_TOP_K["phimoe"], BATCH, SEQ), "meta")
    assert not_alike(train) == why
    with expert_routing(train, BATCH, SEQ, "inputs") as note:
        assert note.startswith("2 mixture-of-experts layers captured with balanced routing (4 experts, top-2 per "
                               "token): 16 rows per expert") and f"--routing inputs does not decide it: {why}" in note
    inference = GraphRequest("tiny-phimoe", TINY_TOP_K["phimoe"], BATCH, SEQ, mode="inference")
    assert not_alike(build_model(inference, "meta")[0]) is None


def test_the_cli_routes_as_the_inputs_do_when_asked(tmp_path, capsys):
    pytest.importorskip(ROUTED["mixtral"].module)
    code, err = _collect(tmp_path, capsys, TINY_TOP_K["mixtral"], "--routing", "inputs", "--inference")
    assert code == 0
    note = " ".join(line.strip() for line in _note_lines(err))
    assert "as the recipe's alike tokens route (4 experts, top-2 per token): 2 expert(s) of 32 rows each" in note
    assert all(len(line) <= 80 for line in _note_lines(err))
    (tmp_path / "again").mkdir()
    code, err = _collect(tmp_path / "again", capsys, TINY_TOP_K["mixtral"], "--routing", "sideways")
    assert code == 2 and err.count("pmdb: error:") == 1 and "unknown --routing 'sideways'" in err


@pytest.mark.parametrize("model_type", sorted(POSITION_MIXING))
def test_a_hybrid_s_tokens_differ_at_its_routers_so_inputs_routing_falls_back_in_eval_mode(tmp_path, model_type):
    """Qwen3-Next's linear attention, MiniMax's lightning attention and Jamba's Mamba layers mix positions, so the
    recipe's all-ones inputs differ at the routers of a real CPU run in eval mode (no dropout, no jitter): --routing
    inputs routes them balanced and the note says why."""
    config = TINY_TOP_K[model_type]
    pytest.importorskip(ROUTED[model_type].module)
    request = GraphRequest(f"tiny-{model_type}", config, BATCH, SEQ, mode="inference", routing="inputs")
    mixer, what = POSITION_MIXING[model_type]
    why = f"its {what} layers mix positions, so the recipe's tokens differ at the routers"
    torch.manual_seed(0)
    model, _, inputs = build_model(request, "cpu")
    assert not model.training and any(type(m).__name__ == mixer for m in model.modules())
    assert not_alike(model) == why
    router = getattr(importlib.import_module(ROUTED[model_type].module), ROUTERS[model_type])
    seen: list[torch.Tensor] = []
    for module in model.modules():
        if isinstance(module, router):
            module.register_forward_pre_hook(lambda _, args: seen.append(args[0].detach()))
    with torch.no_grad():
        model(**inputs)
    assert len(seen) == 2
    assert max(float((h - h[:1]).abs().max()) for h in seen) > 1e-3    # 0.03, 0.10, 0.003 here
    meta = capture(request, tmp_path / "meta.json")
    assert meta.routing.startswith("2 mixture-of-experts layers captured with balanced routing (4 experts, top-2 per "
                                   "token): 16 rows per expert of 32 tokens")
    assert f"--routing inputs does not decide it: {why}" in meta.routing
