"""benchmarks/gpu_node_diagnosis.py on a real NeuSight per-node breakdown (BERT-large b2 on the V100): layer-0 nodes
count num_layer times (once where num_layer is 0: a whole-model trace), nodes fall into the kinds pmdb's ops do, and the table puts the largest gaps first. pmdb's side
is a timeline in the format `pmdb predict --export-trace` writes (compute-stream events)."""
from __future__ import annotations

import gzip
import json

from harness import load_benchmark

import pandas as pd
import pytest


def _module():
    return load_benchmark("gpu_node_diagnosis")


def _event(op: str, phase: str, us: float) -> dict:
    return {"name": op, "cat": "kernel", "ph": "X", "pid": 0, "tid": 2, "ts": 0.0, "dur": us,
            "args": {"op": op, "phase": phase, "stream": "compute", "predicted_us": us}}


def test_label_kinds_and_the_largest_gaps_first(shared_data, tmp_path):
    folder = shared_data / "gpu_e2e" / "neusight_labels" / "Tesla_V100-PCIE-32GB"
    csv = folder / "bert_large-train-512-2.csv.gz"
    if not csv.is_file():
        pytest.skip(f"{csv} not present")
    diag = _module()
    assert [diag.kind_of(n) for n in ("aten::linear", "aten::mm", "aten::bmm", "aten::_softmax_backward_data",
                                      "aten::native_layer_norm_backward", "aten::dropout", "aten::view")] == [
        "linear (GEMM)", "linear (GEMM)", "bmm (attention)", "softmax", "layernorm", "elementwise, dropout",
        "other (views, bookkeeping)"]
    label = diag.label_kinds(csv, num_layer=24)
    nodes = pd.read_csv(csv)
    in_layer = nodes["Name"].str.startswith("bert_encoder_layer_0_")
    dense = nodes["Name"].str.contains("query|key|value|dense|decoder|seq_relationship")
    expected = 24 * nodes.loc[in_layer & dense, "fw_latency"].sum() + nodes.loc[~in_layer & dense, "fw_latency"].sum()
    assert label.loc["linear (GEMM)", "fw"] == pytest.approx(expected)   # 71.2 ms: 24 layers' GEMMs + the heads
    whole = diag.label_kinds(csv, num_layer=0)   # a whole-model trace (NeuSight's Switch labels): each node once
    once = nodes.loc[dense, "fw_latency"].sum()
    assert whole.loc["linear (GEMM)", "fw"] == pytest.approx(once) and once < expected
    timeline = tmp_path / "timeline.json.gz"
    events = [_event("aten::linear", "fw", 60_000.0), _event("aten::mm", "bw", 150_000.0),
              _event("aten::softmax", "fw", 2_400.0), _event("aten::cross_entropy_loss", "loss", 300.0)]
    with gzip.open(timeline, "wt") as handle:
        json.dump({"traceEvents": [*events, {"name": "thread_name", "ph": "M", "pid": 0, "tid": 2, "args": {}}]},
                  handle)
    table = diag.diagnosis(label, diag.pmdb_kinds(timeline), top=3)
    assert len(table) == 3 and list(table["gap_ms"].abs()) == sorted(table["gap_ms"].abs(), reverse=True)
    first = table.iloc[0]
    assert (first["kind"], first["phase"]) == ("linear (GEMM)", "bw")
    assert first["gap_ms"] == pytest.approx(150.0 - label.loc["linear (GEMM)", "bw"])
    lines = diag.markdown(table, "t")
    assert lines[0] == "**t**" and len(lines) == 4 + 3 + 1 and all(len(x) < 120 for x in lines)
