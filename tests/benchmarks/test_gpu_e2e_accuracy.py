"""benchmarks/gpu_e2e_accuracy.py finds its GPUs and runs in the label folders: the V100 (own kernel tables, 5 %) and
the L4 (spec sheet only, 10 %) with their three runs each, and a GPU whose labels are dropped in beside them, named
as its spec sheet, with the target of its kind; folders without a sheet and labels without a model config are not
runs (the 4-GPU labels of the A100 folder are not single-GPU labels); inference labels (-inf-) are runs of their own
mode."""
from __future__ import annotations

import shutil

from harness import load_benchmark

import pytest


def test_the_labelled_gpus_and_runs_are_found(shared_data, tmp_path):
    labels = shared_data / "gpu_e2e" / "neusight_labels"
    sheets = shared_data / "gpu_kernels" / "neusight" / "device_configs"
    if not labels.is_dir() or not sheets.is_dir():
        pytest.skip(f"{labels} or {sheets} not present")
    bench = load_benchmark("gpu_e2e_accuracy")
    found = {g.platform: g for g in bench.discover(labels, sheets)}
    assert set(found) == {"tesla-v100-pcie-32gb", "nvidia-l4"}
    assert found["tesla-v100-pcie-32gb"].own_tables and found["tesla-v100-pcie-32gb"].target == 5.0
    assert not found["nvidia-l4"].own_tables and found["nvidia-l4"].target == 10.0
    assert set(found["nvidia-l4"].runs) == {("bert_large", 512, 2, "train"), ("bert_large", 512, 8, "train"),
                                            ("gpt2_large", 1024, 1, "train")}

    mine = tmp_path / "labels"
    shutil.copytree(labels / "model_configs", mine / "model_configs")
    shutil.copytree(labels / "NVIDIA_L4", mine / "NVIDIA_L4")
    h100 = mine / "NVIDIA_H100_80GB_HBM3"
    h100.mkdir()
    (h100 / "gpt3_xl-train-2048-1.json").write_text("{}")
    (h100 / "nosuchmodel-train-512-2.json").write_text("{}")      # no model config: not a run
    (h100 / "gpt3_xl-inf-2048-1.json").write_text("{}")           # an inference label: a run of its own
    (h100 / "gpt3_xl-eval-2048-1.json").write_text("{}")          # no NeuSight mode: not a run
    (mine / "Some_Other_GPU").mkdir()
    (mine / "Some_Other_GPU" / "gpt3_xl-train-2048-1.json").write_text("{}")   # no spec sheet of that name
    found = {g.platform: g for g in bench.discover(mine, sheets)}
    assert set(found) == {"nvidia-l4", "nvidia-h100-80gb-hbm3"}
    h = found["nvidia-h100-80gb-hbm3"]
    assert not h.own_tables and h.target == 10.0
    assert sorted(h.runs) == [("gpt3_xl", 2048, 1, "inf"), ("gpt3_xl", 2048, 1, "train")]
