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


def test_an_inference_run_is_judged_on_its_forward():
    """An inference label's row (no backward: bw NULL in v_phase_errors) is rendered with '-' for the backward,
    judged on its forward and step, and left out of the L4's mean against NeuSight's (a mean over training steps)."""
    bench = load_benchmark("gpu_e2e_accuracy")
    common = {"platform": bench.L4, "batch_size": 8, "target": 10.0, "unmodelled": None, "lender": "nvidia-h200",
              "device_active_us": 90_000.0, "per_rank": None, "range_low_us": None, "iteration_us": None}
    train = {**common, "trace_set_id": 1, "workload": "bert_large", "run": ("bert_large", 512, 8, "train"),
             "measured_fw_us": 100e3, "measured_bw_us": 200e3, "measured_step_us": 300e3, "predicted_fw_us": 95e3,
             "predicted_bw_us": 190e3, "predicted_step_us": 285e3, "fw_rel_error": -0.05, "bw_rel_error": -0.05,
             "step_rel_error": -0.05, "inference": False}
    inference = {**common, "trace_set_id": 2, "workload": "bert_large", "run": ("bert_large", 512, 8, "inf"),
                 "measured_fw_us": 80e3, "measured_bw_us": None, "measured_step_us": 80e3, "predicted_fw_us": 100e3,
                 "predicted_bw_us": None, "predicted_step_us": 100e3, "fw_rel_error": 0.25, "bw_rel_error": None,
                 "step_rel_error": 0.25, "inference": True}
    assert bench._met(train, 10.0) and not bench._met(inference, 10.0) and bench._met(inference, 30.0)
    lines = bench._targets([train, inference])
    assert "worst 25.0%; mean |step error| 15.0% over 2 runs" in lines[0]
    assert lines[1].startswith(f"- {bench.L4}: mean |step error| of its training runs 5.0%")   # the training run only
    text = bench.render([train, inference], {}, [], (0.1, 0.1, 0.1), 60.0, [])
    assert "| bert_large b8 inf | 80.0 / - / 80.0 | 100.0 / - / 100.0 | +25.0% | - | +25.0% |" in text
