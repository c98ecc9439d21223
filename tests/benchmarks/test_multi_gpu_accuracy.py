"""benchmarks/multi_gpu_accuracy.py's diagnosis helpers: rank 0's parameter count under Megatron's layout against a
real (meta-device) ``transformers`` GPT-2, the optimizer-step floor from it, and the GEMM rates of a real NeuSight
table."""
from __future__ import annotations

import json

from harness import load_benchmark

import pytest

TINY = {"model_type": "gpt2", "n_layer": 4, "n_embd": 64, "n_head": 8, "n_positions": 256, "vocab_size": 1000}


def _module():
    return load_benchmark("multi_gpu_accuracy")


def _hf_parameters(config: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))
    return sum(p.numel() for p in model.parameters())      # the tied lm_head counts once


def test_rank0_parameters_follow_megatrons_layout():
    m = _module()
    h, padded = TINY["n_embd"], 1024                          # 1000 padded to a multiple of 128
    whole = m.rank0_parameters(TINY, 1, 1)
    assert whole == _hf_parameters(TINY) + (padded - TINY["vocab_size"]) * h
    layer = 12 * h * h + 13 * h
    assert m.rank0_parameters(TINY, 1, 2) == 2 * layer + padded * h + 256 * h      # stage 0: 2 layers, embeddings
    # tensor parallel 2: weights and column-parallel biases halved; row-parallel biases and norms whole
    assert m.rank0_parameters(TINY, 2, 1) == 4 * ((12 * h * h + 7 * h) // 2 + 6 * h) + padded // 2 * h \
        + 256 * h + 2 * h
    assert m.optimizer_floor_ms(TINY, 1, 1, 1000.0) == pytest.approx(whole * 32 / 1e12 * 1e3)


def test_table_gemm_rates_stay_under_the_sheet(shared_data):
    m = _module()
    kernels = shared_data / "gpu_kernels" / "neusight"
    if not (kernels / "NVIDIA_A100-PCIE-40GB" / "linear.csv.gz").is_file():
        pytest.skip("the A100-PCIE-40GB NeuSight linear table is not in the shared data")
    median, p90, top, count = m.table_gemm_rates(kernels, "NVIDIA_A100-PCIE-40GB")
    sheet = json.loads((kernels / "device_configs" / "NVIDIA_A100-PCIE-40GB.json").read_text())
    assert count > 100 and 0 < median < p90 < top <= sheet["SingleFLOPs"] / 1e3


def test_split_names_become_what_if_flags():
    m = _module()
    assert m.split_flags("dp4") == ("--data-parallel", "4")
    assert m.split_flags("pp4_1") == ("--pipeline-parallel", "4", "--micro-batches", "1")
    assert m.split_flags("dp2_tp2") == ("--data-parallel", "2", "--tensor-parallel", "2")
    assert m.split_flags("tp2_pp2_4") == ("--tensor-parallel", "2", "--pipeline-parallel", "2", "--micro-batches", "4")
    for bad in ("xx4", "dp4_2", "dp", "tp4-x", ""):
        assert m.split_flags(bad) is None, bad


def test_other_labels_of_the_folder_are_found(tmp_path):
    m = _module()
    folder, configs = tmp_path / "NVIDIA_A100-SXM4-40GB", tmp_path / "model_configs"
    folder.mkdir()
    configs.mkdir()
    (configs / "gpt2_large.json").write_text("{}")
    (configs / "gpt3_xl.json").write_text("{}")
    for name in ("gpt2_large-train-1024-4-dp4.json",        # one of the three the benchmark is built on
                 "gpt3_xl-train-2048-8-tp2_pp2_4.json",     # another: found
                 "opt_13-train-2048-4-tp4.json",            # no model config
                 "gpt3_xl-train-2048-4-zz4.json",           # a split of no known part
                 "gpt3_xl-train-2048-4.json"):              # a single-GPU label
        (folder / name).write_text("{}")
    found = m.other_labels(folder, configs)
    assert [(f[0], f[1], f[2], f[3], f[4]) for f in found] == [
        ("gpt3_xl", 2048, 8, "tp2_pp2_4", ("--tensor-parallel", "2", "--pipeline-parallel", "2", "--micro-batches", "4"))]
    assert m.others_section([])[-1].startswith("None:")
    table = m.others_section([{"run": "gpt3_xl-train-2048-8-tp2_pp2_4", "label_ms": 100.0, "predicted_ms": 108.0}])
    assert table[-1] == "| gpt3_xl-train-2048-8-tp2_pp2_4 | 100.0 | 108.0 | +8.0% | met |"
