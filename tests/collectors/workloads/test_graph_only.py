"""Shape-only capture (``pmdb collect workload transformer --graph-only``): the meta-device op graph of a training
step is the op graph of a real CPU run of the same model and recipe, and it is stored as an ET-only trace set.

The real run is recorded by the same code on the ``cpu`` device (ExecutionTraceObserver, real weights of a tiny
model). Both traces get the same device-neutral pruning of kernel internals (graph_only module docstring, point 1);
the compared sequence is every remaining ``aten::`` op in execution order with its phase and input shapes. Two
differences are inherent to the meta device and are canonicalized in the CPU sequence before comparing (module
docstring, last paragraph), nothing else:

* ``torch.tensor(data)`` literals: a real device records ``aten::to`` + ``aten::lift_fresh`` of the new tensor,
  meta allocates directly: the pair is dropped from the CPU sequence;
* ``aten::_reshape_alias(self, size, stride)`` under ``aten::reshape`` of a non-contiguous input is
  ``aten::view(self, size)`` on meta: compared as that view.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from collectors.workloads.graph_only import PHASE_MARKERS, STEP_MARKER, GraphRequest, capture, workload_identity
from collectors.workloads.store_rows import config_hash
from pmdb.cli.main import main
from pmdb.store import Store

TINY = {"gpt2": {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128, "n_positions": 32,
                 "bos_token_id": 0, "eos_token_id": 0},
        "bert": {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                 "intermediate_size": 256, "vocab_size": 128, "max_position_embeddings": 32}}
PHASE_OF_MARKER = {marker: phase for phase, marker in PHASE_MARKERS.items()}


def _nodes(path: Path) -> list[dict]:
    return sorted(json.loads(path.read_text())["nodes"], key=lambda n: n["id"])


def aten_sequence(path: Path) -> list[tuple]:
    """(phase, op name, input shapes) of every aten op of a normalized trace, in execution order."""
    phase: dict[int, str | None] = {}
    out = []
    for node in _nodes(path):
        phase[node["id"]] = PHASE_OF_MARKER.get(node["name"], phase.get(node.get("ctrl_deps")))
        if node["name"].startswith("aten::"):
            out.append((phase[node["id"]], node["name"], json.dumps(node["inputs"]["shapes"]),
                        node["inputs"]["values"]))
    return out


def canonical_cpu(sequence: list[tuple]) -> list[tuple]:
    """The CPU sequence with the two documented meta differences canonicalized (module docstring)."""
    out: list[tuple] = []
    for item in sequence:
        phase, name, shapes, values = item
        if name == "aten::lift_fresh" and out and out[-1][1] == "aten::to" and out[-1][3][0][0] == values[0][0]:
            out.pop()          # a torch.tensor literal's copy to the device and its lift
            continue
        if name == "aten::_reshape_alias":
            item = (phase, "aten::view", json.dumps(json.loads(shapes)[:2]), values[:2])
        out.append(item)
    return [i[:3] for i in out]


def captured_pairs(folder: Path, mode: str) -> dict[str, dict[str, Path]]:
    """Per tiny model: the meta capture and the real CPU run of the recipe (``mode``; batch 2, sequence 16)."""
    out: dict[str, dict[str, Path]] = {}
    for arch, config in TINY.items():
        out[arch] = {}
        for device in ("cpu", "meta"):
            out[arch][device] = folder / f"{arch}.{device}.et.json"
            capture(GraphRequest(arch, config, 2, 16, mode=mode), out[arch][device], device=device)
    return out


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """The training step's pairs."""
    return captured_pairs(tmp_path_factory.mktemp("graphs"), "train")


@pytest.mark.parametrize("arch", sorted(TINY))
def test_meta_capture_is_the_op_graph_of_a_real_cpu_run(traces, arch):
    meta = aten_sequence(traces[arch]["meta"])
    real = aten_sequence(traces[arch]["cpu"])
    assert [i[:3] for i in meta] == canonical_cpu(real)
    phases = {phase for phase, *_ in meta}
    assert phases == {"forward", "loss", "backward"}  # no optimizer by default; nothing outside the phases
    names = [n["name"] for n in _nodes(traces[arch]["meta"])]
    assert names.count(STEP_MARKER) == 1 and not any(n.startswith("prims::") for n in names)
    # the recorded step is a repetition: every parameter's gradient is accumulated into, in place
    accumulated = [i for i in meta if i[0] == "backward" and i[1] == "aten::add_"]
    assert len(accumulated) >= 2 * TINY[arch].get("n_layer", TINY[arch].get("num_hidden_layers"))


def test_meta_capture_has_rebuilt_storages(traces):
    """Meta tensors have no data pointer: the recorder gives all one storage id; the capture rebuilds them (views
    share their base's storage)."""
    nodes = _nodes(traces["gpt2"]["meta"])
    storages = {v[1] for n in nodes for v in n["inputs"]["values"] if isinstance(v, list) and len(v) == 6
                and isinstance(v[0], int)}
    assert len(storages) > 100
    view = next(n for n in nodes if n["name"] == "aten::view")
    assert view["inputs"]["values"][0][1] == view["outputs"]["values"][0][1]
    mm = next(n for n in nodes if n["name"] == "aten::mm")
    assert mm["outputs"]["values"][0][1] not in {v[1] for v in mm["inputs"]["values"]}


def test_optimizer_is_its_own_phase(tmp_path):
    path = tmp_path / "adamw.et.json"
    capture(GraphRequest("gpt2", TINY["gpt2"], 2, 16, optimizer="adamw"), path)
    sequence = aten_sequence(path)
    optimizer = [name for phase, name, *_ in sequence if phase == "optimizer"]
    assert optimizer and any(n.startswith("aten::_foreach_") for n in optimizer)  # multi-tensor, as on a GPU
    assert any(n["name"].startswith("Optimizer.step#") for n in _nodes(path))


@pytest.fixture(scope="module")
def inference_traces(tmp_path_factory) -> dict[str, dict[str, Path]]:
    """The inference call's pairs."""
    return captured_pairs(tmp_path_factory.mktemp("inference"), "inference")


@pytest.mark.parametrize("arch", sorted(TINY))
def test_inference_capture_is_the_model_call_alone(inference_traces, traces, arch):
    meta = aten_sequence(inference_traces[arch]["meta"])
    assert [i[:3] for i in meta] == canonical_cpu(aten_sequence(inference_traces[arch]["cpu"]))
    assert {phase for phase, *_ in meta} == {"forward"}        # no loss, no backward, nothing outside the call
    names = [n["name"] for n in _nodes(inference_traces[arch]["meta"])]
    assert not any(n.startswith("autograd::") for n in names)   # under no_grad
    ops = {item[1] for item in meta}
    train_ops = {item[1] for item in aten_sequence(traces[arch]["meta"]) if item[0] == "forward"}
    assert "aten::bernoulli_" in train_ops and "aten::bernoulli_" not in ops   # eval mode: no dropout masks drawn
    dropouts = [n for n in _nodes(inference_traces[arch]["meta"]) if n["name"] == "aten::dropout"]
    assert dropouts and all(n["inputs"]["values"][2] is False for n in dropouts)   # train=False: returns its input


def test_inference_heads_and_identity():
    from collectors.workloads.graph_only import RECIPE_INFERENCE, build_config, resolve_head

    bert, gpt2 = build_config(TINY["bert"], "bert"), build_config(TINY["gpt2"], "gpt2")
    assert resolve_head(bert, "auto", "inference") == "sequence-classification"   # NeuSight's get_model
    assert resolve_head(bert, "auto") == "pretraining" and resolve_head(gpt2, "auto", "inference") == "causal-lm"
    train, inference = workload_identity(TINY["gpt2"], 16), workload_identity(TINY["gpt2"], 16, mode="inference")
    assert inference["recipe"] == RECIPE_INFERENCE and train != inference
    assert train == workload_identity(TINY["gpt2"], 16, "auto", "none")   # a training identity as before


def cli(workspace, *args: str) -> int:
    return main(["--home", str(workspace.home), "collect", "workload", "transformer", "--graph-only", *args])


def test_cli_stores_an_et_only_trace_set(workspace, tmp_path, capsys):
    config = tmp_path / "tiny_gpt2.json"
    config.write_text(json.dumps(TINY["gpt2"]))
    assert cli(workspace, "--config", str(config), "--batch-size", "2", "--seq-len", "16") == 0
    with Store.open(workspace, read_only=True) as store:
        traces = store.query("SELECT t.kind, t.iterations, s.source, s.label, s.workload_id, s.measured_us "
                             "FROM v_traces t JOIN v_trace_sets s USING (trace_set_id)")
        assert traces[["kind", "iterations", "source", "label"]].values.tolist() == [["et", 1, "captured",
                                                                                      "tiny_gpt2"]]
        assert traces["measured_us"].isna().all()  # shapes, no durations
        workload = store.query("SELECT * FROM workloads").iloc[0]
        identity = workload_identity(TINY["gpt2"], 16)
        assert json.loads(workload["config"]) == identity and workload["batch_size"] == 2
        assert workload["config_hash"] == config_hash(identity, 2, 1, None)
        ops = store.query("SELECT name, dur_us FROM trace_ops")
        assert ops["dur_us"].isna().all() and set(PHASE_MARKERS[p] for p in ("forward", "loss", "backward")) \
            <= set(ops["name"])
        assert store.scalar("SELECT count(*) FROM workload_runs") == 0   # nothing was measured
        assert store.scalar("SELECT kind FROM collection_runs") == "graph"
    out = capsys.readouterr().out
    assert re.search(r"trace_set_id\s+1", out) and re.search(r"head\s+causal-lm", out)


def test_cli_inference_capture_is_its_own_workload(workspace, tmp_path, capsys):
    config = tmp_path / "tiny_bert.json"
    config.write_text(json.dumps(TINY["bert"]))
    args = ["--config", str(config), "--batch-size", "2", "--seq-len", "16"]
    assert cli(workspace, *args) == 0 and cli(workspace, *args, "--inference") == 0
    out = capsys.readouterr().out
    assert re.search(r"mode\s+inference", out) and re.search(r"head\s+sequence-classification", out)
    with Store.open(workspace, read_only=True) as store:
        configs = [json.loads(c) for c in store.query("SELECT config FROM workloads ORDER BY workload_id")["config"]]
        assert configs == [workload_identity(TINY["bert"], 16), workload_identity(TINY["bert"], 16, mode="inference")]
        phases = store.query("SELECT DISTINCT o.name FROM trace_ops o JOIN v_traces t USING (trace_id) "
                             "WHERE t.trace_set_id = 2 AND o.name LIKE 'pmdb::phase::%'")["name"].tolist()
        assert phases == [PHASE_MARKERS["forward"]]


@pytest.mark.parametrize("args, pattern", [
    (["--config", "/nonexistent/model.json"], r"cannot read model config file /nonexistent/model.json"),
    ([], r"--graph-only needs the model: --config FILE"),
    (["--arch", "gpt2", "--iters", "5", "--warmup", "1"], r"not an option of --graph-only captures: --iters, --warmup"),
    (["--arch", "gpt2", "--world-size", "2"], r"not an option of --graph-only captures: --world-size"),
    (["--arch", "gpt2", "--seq-len", "4096"], r"sequence length 4096 exceeds the model's 1024 positions"),
    (["--arch", "gpt9000"], r"--arch gpt9000: not a usable transformers config"),
    (["--arch", "gpt2", "--head", "classification"], r"unknown --head 'classification' for --graph-only"),
    (["--arch", "gpt2", "--optimizer", "lamb"], r"unknown --optimizer 'lamb'"),
    (["--arch", "gpt2", "--inference", "--optimizer", "adamw"], r"--optimizer adamw with --inference"),
])
def test_bad_graph_requests_are_one_line_errors_without_a_run(workspace, capsys, args, pattern):
    assert cli(workspace, *args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err and lines[0].startswith("pmdb: error: "), err
    assert re.search(pattern, lines[0]), lines[0]
    with Store.open(workspace, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM collection_runs") == 0


def test_config_file_problems(workspace, tmp_path, capsys):
    cases = [("[1, 2]", r"must hold a JSON object"), ('{"n_layer": 2}', r"no 'model_type'"),
             ('{"model_type": "bert"}', None)]
    for text, pattern in cases[:2]:
        path = tmp_path / "model.json"
        path.write_text(text)
        assert cli(workspace, "--config", str(path)) == 2
        err = capsys.readouterr().err
        assert re.search(pattern, err) and err.count("\n") == 1, err
    path = tmp_path / "bert.json"
    path.write_text(cases[2][0])
    assert cli(workspace, "--config", str(path), "--arch", "gpt2") == 2
    assert "--arch gpt2 but the model config" in capsys.readouterr().err
    assert main(["--home", str(workspace.home), "collect", "workload", "transformer", "--arch", "gpt2",
                 "--optimizer", "adamw"]) == 2
    assert "--optimizer goes with --graph-only" in capsys.readouterr().err
    assert main(["--home", str(workspace.home), "collect", "workload", "dlrm", "--graph-only"]) == 2
    assert "not an option of dlrm workloads: --graph-only" in capsys.readouterr().err
