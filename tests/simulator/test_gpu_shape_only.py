"""A model captured shape-only on this CPU, predicted as a GPU known only by its spec sheet runs it: every op with
device work is priced (a model, a forward model scaled to its backward, or the sheet's roofline), the phases are
predicted apart, and the ground truth of a label is found. Real pieces: the meta-device capture, a slice of the real
V100 kernel table, the real spec sheet, a real fit."""
from __future__ import annotations

import gzip
import json

import pytest

from pmdb.cli.main import main
from pmdb.store import Store

TINY_BERT = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
             "intermediate_size": 256, "vocab_size": 128, "max_position_embeddings": 32}
V100 = "tesla-v100-pcie-32gb"


def _slice(source, target, rows: int) -> None:
    lines = gzip.decompress(source.read_bytes()).decode().splitlines()
    target.write_text("\n".join(lines[:rows + 1]) + "\n")


@pytest.fixture
def captured(fit_workspace, shared_data, tmp_path):
    """The V100 sheet, a gelu table slice and its roofline fitted (into a copy of the run's empty MLflow store), and
    a tiny BERT captured shape-only."""
    workspace = fit_workspace
    kernels = shared_data / "gpu_kernels" / "neusight"
    if not (kernels / "Tesla_V100-PCIE-32GB").is_dir():
        pytest.skip(f"{kernels} not present")
    home = ["--home", str(workspace.home)]
    assert main([*home, "platform-specs", str(kernels / "device_configs" / "Tesla_V100-PCIE-32GB.json")]) == 0
    table = tmp_path / "gelu.csv"
    _slice(kernels / "Tesla_V100-PCIE-32GB" / "gelu.csv.gz", table, 200)
    assert main([*home, "collect", "import-ops", str(table), "--format", "neusight", "--platform", V100]) == 0
    assert main([*home, "fit", "--platform", V100, "--op", "gelu", "--family", "roofline", "--no-progress"]) == 0
    config = tmp_path / "tiny_bert.json"
    config.write_text(json.dumps(TINY_BERT))
    assert main([*home, "collect", "workload", "transformer", "--graph-only", "--config", str(config),
                 "--batch-size", "2", "--seq-len", "16"]) == 0
    return home


def test_every_op_with_device_work_is_priced_and_phases_apart(workspace, captured, capsys):
    capsys.readouterr()
    assert main([*captured, "predict", "--trace-set", "1", "--target-platform", V100, "--format", "json"]) == 0
    err = capsys.readouterr().err
    assert f"not {V100}'s own (the default lender" in err     # the documented default is named
    with Store.open(workspace, read_only=True) as store:
        row = store.query("SELECT predicted_us, predicted_fw_us, predicted_loss_us, predicted_bw_us, "
                          "predicted_optimizer_us, CAST(unmodelled AS VARCHAR) AS unmodelled FROM predictions").iloc[0]
    assert row["predicted_fw_us"] > 0 and row["predicted_loss_us"] > 0 and row["predicted_bw_us"] > 0
    assert row["predicted_optimizer_us"] != row["predicted_optimizer_us"]   # NaN: no optimizer was captured
    fallbacks = {(u["op"], u["fallback"]) for u in json.loads(row["unmodelled"])}
    unpriced = {op for op, kind in fallbacks if kind == "unpriced"}
    assert unpriced == set(), unpriced                                # the gradient kernels are all priced
    assert ("aten::gelu_backward", "scaled-fwd") in fallbacks       # by the forward gelu model, scaled
    assert ("aten::native_layer_norm_backward", "roofline") in fallbacks
    assert ("aten::embedding_backward", "roofline") in fallbacks


def test_a_mixture_of_experts_capture_has_no_unpriced_op(workspace, captured, tmp_path, capsys):
    """The router's and the expert loop's gathers, scatters, reductions and fills, which no model maps, are priced
    by the roofline of the sheet's peaks where the capture timed nothing (pmdb.traces.opmap.untimed_work)."""
    pytest.importorskip("transformers.models.switch_transformers")
    from tests.collectors.workloads.test_moe_routing import TINY_SWITCH

    config = tmp_path / "tiny_switch.json"
    config.write_text(json.dumps(TINY_SWITCH))
    assert main([*captured, "collect", "workload", "transformer", "--graph-only", "--config", str(config),
                 "--batch-size", "2", "--seq-len", "16"]) == 0
    capsys.readouterr()
    assert main([*captured, "predict", "--trace-set", "2", "--target-platform", V100, "--format", "json"]) == 0
    with Store.open(workspace, read_only=True) as store:
        unmodelled = store.scalar("SELECT CAST(unmodelled AS VARCHAR) FROM predictions WHERE trace_set_id = 2")
    fallbacks = {(u["op"], u["fallback"]) for u in json.loads(unmodelled)}
    assert {op for op, kind in fallbacks if kind == "unpriced"} == set()
    assert {("aten::index", "roofline"), ("aten::argmax", "roofline"), ("aten::new_zeros", "roofline"),
            ("aten::index_put", "roofline")} <= fallbacks


def test_a_gpu_too_small_for_the_capture_is_said(workspace, captured, shared_data, tmp_path, capsys):
    """A GPU whose memory cannot hold the captured model's fp32 weights and gradients: one warning line, stored with
    the prediction; the V100 (32 GiB) holds the tiny BERT without a word (simulator.memory_fit)."""
    from simulator.memory_fit import held_bytes

    sheet = json.loads((shared_data / "gpu_kernels" / "neusight" / "device_configs" /
                        "Tesla_V100-PCIE-32GB.json").read_text())
    small = tmp_path / "Small_GPU.json"
    small.write_text(json.dumps({**sheet, "Device": "Small GPU", "Dev_Mem": 0.0001}))   # 105 kB
    assert main([*captured, "platform-specs", str(small)]) == 0
    capsys.readouterr()
    assert main([*captured, "predict", "--trace-set", "1", "--target-platform", V100]) == 0
    assert "does not fit" not in capsys.readouterr().err
    assert main([*captured, "predict", "--trace-set", "1", "--target-platform", "small-gpu"]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "does not fit" in line]
    with Store.open(workspace, read_only=True) as store:
        parameters = json.loads(store.scalar("SELECT CAST(summary AS VARCHAR) FROM collection_runs "
                                             "WHERE kind = 'graph'"))["parameters"]
    assert len(warned) == 1 and f"{parameters / 1e9:.2f} B parameters need" in warned[0]
    assert held_bytes(parameters, False, None) == 8 * parameters > 0.0001 * 2 ** 30   # weights and gradients
    assert held_bytes(parameters, True, None) == 4 * parameters and held_bytes(10, False, "adamw") == 160
