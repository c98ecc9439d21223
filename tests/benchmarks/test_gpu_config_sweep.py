"""benchmarks/gpu_config_sweep.py: each model's longest sequence from its config, the capture's printed facts, and a
results table that keeps a config that failed to capture as a row of its own."""
from __future__ import annotations

import json

from harness import load_benchmark


def test_sequences_facts_and_the_table():
    sweep = load_benchmark("gpu_config_sweep")
    assert sweep.sequence_of({"n_positions": 2048}) == 2048
    assert sweep.sequence_of({"max_position_embeddings": 512}) == 512
    assert sweep.sequence_of({"d_model": 1024}) == sweep.DEFAULT_SEQ        # Switch: relative attention, no table
    out = "field         value\ntrace_set_id  7\nparameters    124439808\ncapture_s     2.50\npeak_rss_mib  640.1\n"
    facts = sweep.capture_facts(out)
    assert facts == {"trace_set_id": "7", "parameters": "124439808", "capture_s": "2.50", "peak_rss_mib": "640.1"}
    runs = [{"model": "gpt2", "mode": "train", "seq": 1024, **facts, "routed": False},
            {"model": "odd", "mode": "inference", "seq": 512, "failed": "pmdb: error: odd: not a usable config"}]
    unmodelled = json.dumps([{"op": "aten::argmax", "fallback": "roofline", "count": 2, "predicted_share": 0.01},
                             {"op": "aten::foo", "fallback": "unpriced", "count": 3}])
    rows = [{"trace_set_id": 7, "gpu": "h100", "predicted_us": 12_345.0, "device_active_us": 12_000.0,
             "per_rank": json.dumps([{"cpu_us": 13_000.0}]), "unmodelled": unmodelled}]
    text = sweep.render(runs, rows, ["h100"], 1, [], (0.5, 0.5, 0.5), 60.0)
    assert "| gpt2 | train | 1024 | 0.12 B | 2.50 | 640.1 | 12.3 host (1.0%, 3) |" in text
    assert "| odd | inference | 512 | - | failed: pmdb: error: odd: not a usable config | - | - |" in text
    assert "- captured: 1 of 2 (model, mode) pairs; predicted: 1 of 2 on 1 GPUs" in text
