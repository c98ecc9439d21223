"""Mixture-of-experts layers in a shape-only capture (collectors/workloads/moe_routing.py): a Switch Transformer,
whose expert loop is data-dependent and failed on the meta device, is captured with balanced routing under its
capacity; every expert's GEMMs get the stated rows; the replacement records no op kind that a real CPU run of the
same tiny model does not; the CLI says how the experts were routed."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from collectors.workloads.graph_only import GraphRequest, build_model, capture, record_step
from collectors.workloads.moe_routing import balanced_routing, tokens_per_expert
from pmdb.cli.main import main

TINY_SWITCH = {"model_type": "switch_transformers", "d_model": 32, "d_ff": 48, "d_kv": 8, "num_heads": 4,
               "num_layers": 2, "num_decoder_layers": 2, "num_sparse_encoder_layers": 1,
               "num_sparse_decoder_layers": 1, "encoder_sparse_step": 2, "decoder_sparse_step": 2, "num_experts": 4,
               "expert_capacity": 3, "vocab_size": 100, "dropout_rate": 0.1, "router_jitter_noise": 0.01,
               "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
BATCH, SEQ = 2, 16


def test_rows_per_expert_balanced_under_the_capacity():
    assert tokens_per_expert(2048, 2, 4, 64) == 128      # 1024 per sequence / 4 = 256, capped at 64, x 2 sequences
    assert tokens_per_expert(2048, 2, 4, None) == 512    # no cap: the even share
    assert tokens_per_expert(2048, 2, 4, 1000) == 512    # a cap above the share changes nothing
    assert tokens_per_expert(30, 2, 4, None) == 2 * 4    # 15 per sequence over 4 experts: 4 (ceil) each


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


def _aten_names(path: Path) -> set[str]:
    return {n["name"] for n in json.loads(path.read_text())["nodes"] if n["name"].startswith("aten::")}


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


def test_the_cli_says_how_the_experts_were_routed(tmp_path, capsys):
    pytest.importorskip("transformers.models.switch_transformers")
    config = tmp_path / "switch.json"
    config.write_text(json.dumps(TINY_SWITCH))
    home = tmp_path / "ws"
    assert main(["--home", str(home), "init"]) == 0
    capsys.readouterr()
    assert main(["--home", str(home), "collect", "workload", "transformer", "--graph-only", "--config", str(config),
                 "--batch-size", str(BATCH), "--seq-len", str(SEQ)]) == 0
    err = capsys.readouterr().err
    assert "pmdb: note: 2 mixture-of-experts layers captured with balanced routing" in err
    assert all(len(line) <= 80 for line in err.splitlines() if line.startswith(("pmdb: note", "  ")))


def test_a_model_without_experts_is_left_as_it_is():
    model = type("M", (), {"config": type("C", (), {"model_type": "gpt2"})()})()
    with balanced_routing(model, 2, 16) as note:
        assert note is None
