"""Data-, tensor- and pipeline-parallel steps derived from one shape-only GPT-2 capture (a real meta-device capture of
a tiny GPT-2, the real A100 SXM4 spec sheet, vTrain's real 4-GPU all-reduce table and a real sigmoid fit)."""
from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from pmdb.cli.main import main
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from simulator.model_set import ModelSet
from simulator.whatif_parallel import (COMM_OP, CommPricer, LinkFigures, ParallelSpec, forward_parameters, check,
                                       gradient_buckets, model_dims, one_f_one_b, padded_vocab, pipeline_send_us,
                                       split_stages, tensor_parallel, tied_embedding_us)

H, HEADS, LAYERS, VOCAB, SEQ, BATCH = 64, 8, 4, 1000, 32, 4
TINY_GPT2 = {"model_type": "gpt2", "n_layer": LAYERS, "n_embd": H, "n_head": HEADS, "n_positions": 256,
             "vocab_size": VOCAB, "activation_function": "gelu_new"}
A100 = "nvidia-a100-sxm4-40gb"
SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


@pytest.fixture(scope="module")
def captured(tmp_path_factory, mlflow_template):
    """(home args, workspace) with the tiny GPT-2 captured at batch 4 and a 4-GPU all_reduce model fitted (its empty
    MLflow store a copy of the run's template)."""
    import shutil

    shared_data = SHARED_DATA
    sheet = shared_data / "gpu_kernels" / "neusight" / "device_configs" / "NVIDIA_A100-SXM4-40GB.json"
    table = shared_data / "collectives" / "vtrain_a100_allreduce" / "AR_GPU4.csv"
    if not sheet.is_file() or not table.is_file():
        pytest.skip(f"{sheet} or {table} not present (the shared data folder)")
    root = tmp_path_factory.mktemp("parallel")
    home = ["--home", str(root / "ws")]
    sliced = root / table.name                      # 1-128 MiB of the real table: the fit takes seconds
    sliced.write_text("".join(table.read_text().splitlines(keepends=True)[:129]))
    table = sliced
    config = root / "tiny_gpt2.json"
    config.write_text(json.dumps(TINY_GPT2))
    assert main([*home, "init"]) == 0
    shutil.copy(mlflow_template.mlflow_db, root / "ws" / "mlflow.db")
    assert main([*home, "platform-specs", str(sheet)]) == 0
    assert main([*home, "collect", "import-comms", str(table), "--format", "nccl-tests", "--platform", A100]) == 0
    assert main([*home, "fit", "--platform", A100, "--op", "all_reduce", "--no-progress"]) == 0
    assert main([*home, "collect", "workload", "transformer", "--graph-only", "--config", str(config),
                 "--batch-size", str(BATCH), "--seq-len", str(SEQ)]) == 0
    return home, root / "ws"


@pytest.fixture(scope="module")
def graph(captured):
    from pmdb.config import resolve_workspace

    with Store.open(resolve_workspace(str(captured[1])), read_only=True) as store:
        return load_graphs(store, 1, pick="best", detail=False)[0]


def _param_bytes() -> int:
    per_layer = 2 * 2 * H + (H * 3 * H + 3 * H) + (H * H + H) + (H * 4 * H + 4 * H) + (4 * H * H + H)
    return 4 * (VOCAB * H + 256 * H + LAYERS * per_layer + 2 * H)      # tied token embedding, positions, final norm


def test_dims_come_from_the_graph(graph):
    dims = model_dims(graph)
    assert (dims.hidden, dims.heads, dims.layers, dims.vocab, dims.seq, dims.batch) == \
        (H, HEADS, LAYERS, VOCAB, SEQ, BATCH)


def test_tensor_parallel_cuts_megatron_gemms_and_inserts_its_all_reduces(graph):
    dims = model_dims(graph)
    pricer = CommPricer(ModelSet())
    cut, shapes = tensor_parallel(graph, dims, 2, BATCH, pricer)
    ops = cut.ranks[0].ops
    comms = [op for op in ops if op.name.startswith(COMM_OP)]
    fw = [op for op in comms if op.phase == "fw"]
    bw = [op for op in comms if op.phase == "bw"]
    assert len(fw) == 2 * LAYERS + 1 and len(bw) == 2 * LAYERS + 1       # f/g per layer, embedding, logits
    assert sum(op.phase == "loss" for op in comms) == 3                  # vocab-parallel cross-entropy
    assert all(op.comm_bytes == BATCH * SEQ * H * 4 for op in fw + bw)
    gemms = [op.input_shapes for op in ops if op.name == "aten::addmm"]
    assert [[BATCH * SEQ, H], [H, 3 * H // 2]] == gemms[0][1:3]          # QKV: half its columns
    assert [[BATCH * SEQ, H // 2], [H // 2, H]] == gemms[1][1:3]         # attention output: half its rows
    softmax = next(op for op in ops if op.name == "aten::softmax")
    assert softmax.input_shapes[0] == [BATCH, HEADS // 2, SEQ, SEQ]
    linear = next(op for op in ops if op.name == "aten::linear")
    assert linear.input_shapes[1] == [padded_vocab(VOCAB, 2) // 2, H]
    after = ops[ops.index(fw[1]) + 1]
    assert after.waits_on == () and shapes > 0   # dependencies are set per program (chunk), not here
    assert graph.ranks[0].ops[0] is not ops[0]   # the recorded graph is left alone


def test_stages_split_the_layers_and_cover_every_op(graph):
    dims = model_dims(graph)
    ops = graph.ranks[0].ops
    stages = split_stages(ops, dims, 2)
    norms = [sum(op.name == "aten::layer_norm" for op in f) for f, _ in stages]
    grads = [sum(op.name == "aten::native_layer_norm_backward" for op in b) for _, b in stages]
    assert norms == [LAYERS, LAYERS + 1] and grads == [LAYERS, LAYERS + 1]
    assert sum(len(f) + len(b) for f, b in stages) == len(ops)
    assert stages[0][1][-1] is ops[-1] and any(op.name == "aten::cross_entropy_loss" for op in stages[1][0])


def test_gradient_buckets_reduce_every_parameter_once(graph):
    dims = model_dims(graph)
    (fw, bw), = split_stages(graph.ranks[0].ops, dims, 1)
    pricer = CommPricer(ModelSet())
    out, total = gradient_buckets(bw, forward_parameters(fw), 4, pricer)
    assert total == _param_bytes()
    buckets = [op for op in out if op.name.startswith(COMM_OP)]
    assert sum(op.comm_bytes for op in buckets) == total and len(buckets) == 1   # under the first 1 MiB bucket
    assert pricer.used == {"all_reduce@4": LinkFigures().name(4)}


def test_one_f_one_b_prices_the_bubble():
    assert one_f_one_b([3.0], [5.0], [6.0], 1, 0.0).step_us == 9.0
    sched = one_f_one_b([1.0] * 4, [2.0] * 4, [2.0] * 4, 1, 0.5)         # one micro-batch: one after another
    assert sched.step_us == 4 * 1.0 + 4 * 2.0 + 2 * 3 * 0.5
    sched = one_f_one_b([1.0] * 4, [2.0] * 4, [2.0] * 4, 8, 0.0)          # equal stages: (M + P - 1)(f + b)
    assert sched.step_us == (8 + 3) * 3.0 and math.isclose(sched.bubble_share, 3 / 11)
    tied = one_f_one_b([1.0] * 4, [2.0] * 4, [2.0] * 4, 1, 0.5, embedding_us=7.0)  # after stage 0's backward
    assert tied.step_us == 4 * 1.0 + 4 * 2.0 + 2 * 3 * 0.5 + 7.0 and tied.stage_end_us[3] == tied.step_us
    assert one_f_one_b([3.0], [5.0], [6.0], 1, 0.0, embedding_us=7.0).step_us == 9.0   # one stage: one table


def test_pipeline_sends_scatter_over_tensor_ranks_and_gather(graph):
    dims = model_dims(graph)
    link = LinkFigures()
    pricer = CommPricer(ModelSet(), link)
    size = BATCH * SEQ * H * 4
    assert pipeline_send_us(pricer, dims, BATCH, 1) == link.time_us("send", 2, size)
    split = pipeline_send_us(pricer, dims, BATCH, 4)
    assert split == link.time_us("send", 2, size / 4) + link.time_us("all_gather", 4, size)
    assert link.time_us("all_gather", 4, size) < link.time_us("all_reduce", 4, size)
    assert set(pricer.used) == {"pipeline send@2", "pipeline all_gather@4"}
    assert tied_embedding_us(pricer, dims, ParallelSpec(tp=2)) == 0.0             # one stage holds the table
    table = padded_vocab(VOCAB, 2) // 2 * H * 4
    assert tied_embedding_us(pricer, dims, ParallelSpec(tp=2, pp=2)) == link.time_us("all_reduce", 2, table)
    assert pricer.used["tied embedding all_reduce@2"] == link.name(2)


def test_all_gather_without_its_own_model_is_half_the_all_reduce_model(captured):
    from pmdb.config import resolve_workspace
    from simulator.model_set import load_model_set

    with Store.open(resolve_workspace(str(captured[1])), read_only=True) as store:
        models = load_model_set(store, A100)
    pricer = CommPricer(models)
    gather, reduce = pricer.time_us("all_gather", 4, 8e6), pricer.time_us("all_reduce", 4, 8e6)
    assert gather == 0.5 * reduce > 0
    assert pricer.used["all_gather@4"].startswith("all_reduce.ws4") and "reduce-scatter" in pricer.used["all_gather@4"]


@pytest.mark.parametrize("spec, message", [
    (ParallelSpec(tp=3), "does not divide the 8 attention heads"),
    (ParallelSpec(pp=3), "does not divide the 4 layers"),
    (ParallelSpec(dp=2, tp=2, gpus=8), "= 4 GPUs, but --gpus is 8"),
    (ParallelSpec(dp=4, micro_batches=2), "does not divide into 4 data-parallel ranks x 2 micro-batches"),
])
def test_bad_combinations_are_refused(graph, spec, message):
    with pytest.raises(PmdbError, match=message):
        check(spec, model_dims(graph), BATCH)


def test_link_figures_price_what_no_model_covers():
    link = LinkFigures()
    assert link.time_us("all_reduce", 16, 1e6) > link.time_us("all_reduce", 8, 1e6) > 0   # across nodes: the NIC
    assert CommPricer(ModelSet()).time_us("all_reduce", 1, 1e6) == 0.0


def test_cli_stores_the_derivation_and_names_the_collective_models(captured, capsys):
    home, ws = captured
    capsys.readouterr()
    assert main([*home, "predict", "--what-if", "--trace-set", "1", "--target-platform", A100, "--data-parallel",
                 "4", "--format", "json"]) == 0
    row, = json.loads(capsys.readouterr().out)
    assert row["collectives"].startswith("all_reduce@4: all_reduce.ws4") and row["predicted_ms"] > 0
    assert main([*home, "predict", "--what-if", "--trace-set", "1", "--target-platform", A100,
                 "--tensor-parallel", "2", "--pipeline-parallel", "2", "--gpus", "4"]) == 0
    out = capsys.readouterr().out
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "send@2: link figures: NVLink" in out and "all_reduce@2: link figures" in out
    from pmdb.config import resolve_workspace

    with Store.open(resolve_workspace(str(ws)), read_only=True) as store:
        rows = store.query("SELECT t.trace_set_id, t.parent_trace_set_id, t.world_size, t.source, "
                           "CAST(t.derivation AS VARCHAR) AS d, p.predicted_us FROM trace_sets t JOIN predictions p "
                           "USING (trace_set_id) ORDER BY t.trace_set_id").to_dict("records")
        models = store.query("SELECT name FROM prediction_models").name.tolist()
    assert [(r["parent_trace_set_id"], r["world_size"], r["source"]) for r in rows] == [(1, 4, "derived")] * 2
    dp, tp_pp = (json.loads(r["d"]) for r in rows)
    assert dp["parallel"] == {"data": 4, "tensor": 1, "pipeline": 1, "micro_batches": 1}
    assert dp["micro_batch"] == 1 and dp["gradient_bytes_per_rank"] == _param_bytes()
    assert dp["collectives"]["all_reduce@4"].startswith("all_reduce") and any("all_reduce" in m for m in models)
    assert tp_pp["micro_batch"] == BATCH and len(tp_pp["stage_fw_us"]) == 2 and tp_pp["send_us"] > 0
    assert tp_pp["tied_embedding_all_reduce_us"] > 0 and "tied embedding all_reduce@2" in tp_pp["collectives"]
    assert "pipeline all_gather@2" in tp_pp["collectives"] and "tied embedding all-reduce" in out
    assert all(r["predicted_us"] > 0 for r in rows)


@pytest.mark.parametrize("args, message", [
    (["--tensor-parallel", "3"], "does not divide the 8 attention heads"),
    (["--data-parallel", "2", "--gpus", "4"], "but --gpus is 4"),
    (["--data-parallel", "2", "--world-size", "2"], "do not combine"),
    (["--data-parallel", "3"], "does not divide into 3 data-parallel ranks"),
])
def test_cli_mistakes_are_one_line(captured, capsys, args, message):
    home, _ = captured
    capsys.readouterr()
    code = main([*home, "predict", "--what-if", "--trace-set", "1", "--target-platform", A100, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("pmdb: error:") and message in err[0], err


def test_megatron_fusions_drop_the_eager_passes_fused_kernels_save(graph):
    from simulator.whatif_parallel import megatron_fusions

    dims = model_dims(graph)
    ops = graph.ranks[0].ops
    kept, dropped = megatron_fusions(ops, dims)
    gone = [op.name for op in ops if op not in kept]
    # fp32 (the capture records no types): per layer 7 of 8 GELU ops (fw), 10 of 11 (bw), 2 residual adds (fw);
    # the scale and mask before the softmax stay (Megatron's fused softmax kernel takes fp16/bf16 input only)
    assert dropped == len(gone) == LAYERS * (7 + 10 + 2), sorted(set(gone))
    assert sum(op.name == "aten::softmax" for op in kept) == LAYERS
    assert sum(op.name in ("aten::tanh", "aten::tanh_backward") for op in kept) == 2 * LAYERS
    scores = [copy.copy(op) for op in ops]
    for op in scores:
        op.input_types = ["Tensor(c10::Half)"]
    _, half = megatron_fusions(scores, dims)
    assert half == dropped + LAYERS * (2 + 1)     # + scale and mask (fw), scale gradient (bw)
