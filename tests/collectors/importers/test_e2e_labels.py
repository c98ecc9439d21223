"""``pmdb collect import-e2e``: measured GPU training steps become the ground truth of the workload a shape-only
capture of the same model config, batch and sequence stores; the import is checked first, atomic and idempotent."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from collectors.importers.e2e_labels import import_e2e_files
from collectors.workloads.graph_only import workload_identity
from collectors.workloads.requests import graph_request
from collectors.workloads.store_rows import config_hash, ensure_workload, write_ground_truth
from pmdb import platform as platforms
from pmdb.cli import collect as collect_cli
from pmdb.cli.main import main
from pmdb.errors import PmdbError
from pmdb.store import Store
from simulator.store_rows import ground_truth

TINY = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128, "n_positions": 32,
        "bos_token_id": 0, "eos_token_id": 0}
LABEL = {"num_layer": 2, "e2e_latency": 3.0, "fw_latency": 1.0, "bwall_latency": 2.0}


def labels_tree(root: Path, label: dict | None = None, name: str = "tiny_gpt2-train-16-2.json",
                gpu: str = "Tesla_T4") -> Path:
    """NeuSight's layout: <root>/model_configs/<model>.json and <root>/<GPU>/<model>-train-<seq>-<batch>.json."""
    (root / "model_configs").mkdir(parents=True, exist_ok=True)
    (root / "model_configs" / "tiny_gpt2.json").write_text(json.dumps(TINY))
    (root / gpu).mkdir(exist_ok=True)
    path = root / gpu / name
    path.write_text(json.dumps(LABEL if label is None else label) if not isinstance(label, str) else label)
    return path


@pytest.fixture(autouse=True)
def command_registered():
    """`pmdb collect import-e2e` as the CLI will have it once pmdb/cli/collect.py lists the module."""
    from pmdb.cli import collect_import_e2e

    if "import-e2e" not in {c.name for c in collect_cli.collect_app.registered_commands}:
        collect_import_e2e.register(collect_cli.collect_app)


def test_label_is_the_ground_truth_of_the_graph_capture(workspace, store, tmp_path):
    """End to end: a shape-only capture of a config file and a label of that model at the same batch and sequence
    share one workload, so the simulator's ground-truth lookup of the capture on the GPU finds the label."""
    label = labels_tree(tmp_path, LABEL)
    report = import_e2e_files(store, [label.parent], "neusight", platform="t4", create_platform=True)
    (imported, run_id, workload_id), = report.imported
    row = store.query("SELECT * FROM v_workload_runs WHERE run_id = ?", [run_id]).iloc[0]
    assert (row["measured_us"], row["fw_us"], row["bw_us"]) == (3000.0, 1000.0, 2000.0)
    assert row["source"] == "imported" and row["platform"] == "t4" and row["source_file"] == imported.sha256
    gpu = platforms.load(store, "t4")
    assert gpu.is_imported and gpu.cuda and gpu.gpu.name == "Tesla T4"
    store.close()
    config = tmp_path / "model_configs" / "tiny_gpt2.json"
    argv = ["--home", str(workspace.home), "collect", "workload", "transformer", "--graph-only", "--config",
            str(config), "--batch-size", "2", "--seq-len", "16"]
    assert main(argv) == 0
    with Store.open(workspace) as reopened:
        set_id, set_workload = reopened.conn.execute("SELECT trace_set_id, workload_id FROM v_trace_sets").fetchone()
        assert set_workload == workload_id
        assert ground_truth(reopened, set_id, "t4", "model") == (run_id, 3000.0)
        assert ground_truth(reopened, set_id, "t4-other", "model")[0] is None  # another GPU: no ground truth


INFERENCE = {"num_layer": 2, "e2e_latency": 1.25, "fw_latency": 1.25, "bwall_latency": 0}


def test_inference_label_is_the_ground_truth_of_the_inference_capture(workspace, store, tmp_path):
    """An -inf- label (the model call alone) meets the --inference capture of its model, not the training one."""
    train = labels_tree(tmp_path, LABEL)
    inference = labels_tree(tmp_path, INFERENCE, name="tiny_gpt2-inf-16-2.json")
    report = import_e2e_files(store, [train, inference], "neusight", platform="t4", create_platform=True)
    runs = {label.mode: (run_id, workload_id) for label, run_id, workload_id in report.imported}
    assert sorted(runs) == ["inference", "train"] and runs["inference"][1] != runs["train"][1]
    row = store.query("SELECT * FROM v_workload_runs WHERE run_id = ?", [runs["inference"][0]]).iloc[0]
    assert (row["measured_us"], row["fw_us"]) == (1250.0, 1250.0) and row["bw_us"] != row["bw_us"]  # NULL
    store.close()
    config = tmp_path / "model_configs" / "tiny_gpt2.json"
    argv = ["--home", str(workspace.home), "collect", "workload", "transformer", "--graph-only", "--config",
            str(config), "--batch-size", "2", "--seq-len", "16"]
    assert main(argv) == 0 and main([*argv, "--inference"]) == 0
    with Store.open(workspace) as reopened:
        sets = dict(reopened.conn.execute("SELECT workload_id, trace_set_id FROM v_trace_sets").fetchall())
        assert ground_truth(reopened, sets[runs["inference"][1]], "t4", "model") == (runs["inference"][0], 1250.0)
        assert ground_truth(reopened, sets[runs["train"][1]], "t4", "model") == (runs["train"][0], 3000.0)


def test_reimport_is_skipped_and_measured_runs_keep_working(store, tmp_path):
    label = labels_tree(tmp_path)
    copy = tmp_path / "elsewhere" / "Tesla_T4" / label.name
    copy.parent.mkdir(parents=True)
    shutil.copy(label, copy)
    first = import_e2e_files(store, [label], "neusight", platform="t4", create_platform=True)
    again = import_e2e_files(store, [copy, label], "neusight", platform="t4",
                             model_configs=tmp_path / "model_configs")
    assert len(first.imported) == 1 and not again.imported
    reasons = dict(again.skipped)
    assert reasons[copy].startswith("already imported") and reasons[label].startswith(f"same content as {copy}")
    assert store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'import-e2e'") == 1
    # a run measured here (no phases) next to it
    local = platforms.resolve(store, None)
    workload = ensure_workload(store, family="transformer", name="x", config={"arch": "gpt2"}, batch_size=2,
                               world_size=1)
    with store.run("workload", local, {}) as run:
        write_ground_truth(store, run_id=run.run_id, workload_id=workload, platform=local, iterations=2, warmup=0,
                           threads=1, allocator={}, results=[{"rank": 0, "times_us": [5.0, 7.0]}])
    measured = store.query("SELECT measured_us, fw_us, bw_us, source FROM v_workload_runs WHERE run_id = ?",
                           [run.run_id]).iloc[0]
    assert measured["measured_us"] == 6.0 and measured["source"] == "measured"
    assert measured[["fw_us", "bw_us"]].isna().all()


BAD = [
    ("tiny_gpt2-train-16-2.json", {"e2e_latency": 3.0, "bwall_latency": 2.0}, r"no field fw_latency"),
    ("tiny_gpt2-train-16-2.json", dict(LABEL, bwall_latency="2"), r"field bwall_latency is '2', not a number of ms"),
    ("tiny_gpt2-train-16-2.json", dict(LABEL, e2e_latency=-3.0), r"field e2e_latency is -3.0"),
    ("tiny_gpt2-train-16-2.json", dict(LABEL, e2e_latency=4.0), r"field e2e_latency \(4 ms\) is not fw_latency \+"),
    ("tiny_gpt2-train-16-2.json", dict(LABEL, num_layer=3), r"field num_layer is 3 but the model config .* 2 layers"),
    ("tiny_gpt2-train-16-2.json", "{not json", r"tiny_gpt2-train-16-2.json:1: not valid JSON"),
    ("tiny_gpt2-eval-16-2.json", LABEL, r"mode 'eval' in the file name; NeuSight labels are training steps"),
    ("tiny_gpt2-inf-16-2.json", LABEL, r"field bwall_latency is 2.0; an inference label .* must be 0"),
    ("tiny_gpt2_16_2.json", LABEL, r"file name is not <model>-train-<seq>-<batch>.json"),
    ("huge-train-16-2.json", LABEL, r"no model config .*huge.json for model 'huge'"),
    ("tiny_gpt2-train-64-2.json", LABEL, r"sequence length 64 exceeds the model's 32 positions"),
]


@pytest.mark.parametrize("name, content, pattern", BAD)
def test_a_bad_file_is_one_error_and_nothing_is_stored(store, tmp_path, name, content, pattern):
    good = labels_tree(tmp_path, dict(LABEL, e2e_latency=3.5, bwall_latency=2.5), name="tiny_gpt2-train-16-4.json")
    bad = labels_tree(tmp_path, content, name=name)
    with pytest.raises(PmdbError, match=pattern) as info:
        import_e2e_files(store, [good, bad], "neusight", platform="t4", create_platform=True)
    assert str(bad) in str(info.value) and "\n" not in str(info.value)
    assert store.scalar("SELECT count(*) FROM collection_runs") == 0
    assert store.scalar("SELECT count(*) FROM platforms") == 0


def test_same_content_under_another_name_is_refused(store, tmp_path):
    label = labels_tree(tmp_path)
    twin = labels_tree(tmp_path, name="tiny_gpt2-train-16-4.json")
    with pytest.raises(PmdbError, match=r"tiny_gpt2-train-16-4.json: same content as .*tiny_gpt2-train-16-2.json "
                                        r"\(given before\) but another model, sequence, batch or mode"):
        import_e2e_files(store, [label, twin], "neusight", platform="t4", create_platform=True)
    import_e2e_files(store, [label], "neusight", platform="t4", create_platform=True)
    with pytest.raises(PmdbError, match=r"\(already imported\) but another"):
        import_e2e_files(store, [twin], "neusight", platform="t4")


def test_platform_rules(store, tmp_path):
    label = labels_tree(tmp_path)
    with pytest.raises(PmdbError, match=r"unknown platform 't4'.*pmdb platform-specs.*--create-platform"):
        import_e2e_files(store, [label], "neusight", platform="t4")
    local = platforms.resolve(store, None)
    with pytest.raises(PmdbError, match=r"is this machine"):
        import_e2e_files(store, [label], "neusight", platform=local)
    platforms.ensure_named(store, "remote-cpu", device_kind="cpu")
    with pytest.raises(PmdbError, match=r"is a cpu platform"):
        import_e2e_files(store, [label], "neusight", platform="remote-cpu")
    other = labels_tree(tmp_path, dict(LABEL, fw_latency=1.5, e2e_latency=3.5), name="tiny_gpt2-train-16-4.json",
                        gpu="NVIDIA_L4")
    with pytest.raises(PmdbError, match=r"several GPU folders \(NVIDIA L4, Tesla T4\)"):
        import_e2e_files(store, [label, other], "neusight", platform="t4", create_platform=True)
    assert store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'import-e2e'") == 0


def test_neusight_gpu_labels(store, shared_data):
    """The V100 labels of ../shared/data: phases in µs, and the workload a capture of the same config file, batch
    and sequence gets (the matching rule: model config digest + seq + recipe head/optimizer, batch, world size 1)."""
    folder = shared_data / "gpu_e2e" / "neusight_labels" / "Tesla_V100-PCIE-32GB"
    report = import_e2e_files(store, [folder], "neusight", platform="tesla-v100-pcie-32gb", create_platform=True)
    got = {(label.model, label.batch_size, label.seq_len): (label, workload) for label, _, workload in report.imported}
    assert set(got) == {("bert_large", 2, 512), ("bert_large", 8, 512), ("gpt2_large", 1, 1024)}
    label, workload = got[("gpt2_large", 1, 1024)]
    raw = json.loads((folder / "gpt2_large-train-1024-1.json").read_text())
    assert label.fw_us == pytest.approx(raw["fw_latency"] * 1e3) and label.e2e_us == pytest.approx(
        raw["e2e_latency"] * 1e3)
    config = shared_data / "gpu_e2e" / "neusight_labels" / "model_configs" / "gpt2_large.json"
    request = graph_request({"config": config, "batch_size": 1, "seq_len": 1024})
    stored = store.query("SELECT config_hash, name FROM workloads WHERE workload_id = ?", [workload]).iloc[0]
    assert stored["config_hash"] == config_hash(request.identity(), 1, 1, None) and stored["name"] == "gpt2_large"
    assert request.identity() == workload_identity(json.loads(config.read_text()), 1024)
    assert platforms.load(store, "tesla-v100-pcie-32gb").gpu.name == "Tesla V100-PCIE-32GB"


def test_cli(workspace, tmp_path, capsys):
    label = labels_tree(tmp_path)
    home = ["--home", str(workspace.home), "collect", "import-e2e"]
    for args, pattern in [([str(label), "--platform", "t4"], r"give --format \(neusight\)"),
                          ([str(label), "--format", "csv", "--platform", "t4"], r"bad --format 'csv'"),
                          ([str(label), "--format", "neusight"], r"give --platform NAME"),
                          (["--format", "neusight", "--platform", "t4"], r"give the label files"),
                          ([str(tmp_path / "none.json"), "--format", "neusight", "--platform", "t4"],
                           r"no such file: .*none.json"),
                          ([str(label), "--format", "neusight", "--platform", "t4"], r"unknown platform 't4'")]:
        assert main(home + args) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("pmdb: error: ") and re.search(pattern, err), err
    with Store.open(workspace, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM collection_runs") == 0
    assert main(home + [str(label.parent), "--format", "neusight", "--platform", "t4", "--create-platform"]) == 0
    shown = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())  # one row: a field per line
    assert (shown["model"], shown["batch"], shown["seq"]) == ("tiny_gpt2", "2", "16")
    assert (float(shown["fw_us"]), float(shown["bw_us"]), float(shown["e2e_us"])) == (1000, 2000, 3000)
    assert main(home + [str(label), "--format", "neusight", "--platform", "t4"]) == 0
    assert "nothing new to import on platform t4" in capsys.readouterr().out
    assert main(home + ["--help"]) == 0 and "--create-platform" in capsys.readouterr().out
