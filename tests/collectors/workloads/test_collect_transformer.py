"""Transformer ground truth and traces: the paper's three architectures and one it does not name."""
from __future__ import annotations

import pytest

from collectors.workloads.collect import collect_workload
from collectors.workloads.requests import transformer_request

pytestmark = pytest.mark.slow

TINY = {"layers": 1, "hidden": 32, "heads": 2, "seq_len": 16, "batch_size": 4, "iters": 3, "warmup": 1,
        "trace_iters": 2, "timeout_s": 180, "threads": 1}


def run(store, platform, **opts):
    request = transformer_request({**TINY, **opts})
    summary = collect_workload(store, platform, request, {"arch": opts["arch"]})
    run_id = store.scalar("SELECT run_id FROM collection_runs ORDER BY started_at DESC LIMIT 1")
    return request, summary, run_id


@pytest.mark.parametrize("arch, world_size", [("gpt2", 2), ("bert", 1), ("xlnet", 1), ("opt", 1)])
def test_architectures_store_ground_truth_and_both_traces(store, local_platform, arch, world_size):
    request, summary, run_id = run(store, local_platform, arch=arch, world_size=world_size,
                                   no_trace=arch == "opt")
    e2e = store.query("SELECT rank, count(*) AS n, min(time_us) AS t FROM v_e2e_measurements WHERE run_id = ? "
                      "GROUP BY rank ORDER BY rank", [run_id])
    assert e2e["rank"].tolist() == list(range(world_size)) and set(e2e["n"]) == {3} and (e2e["t"] > 0).all()
    wl = store.query("SELECT * FROM workloads WHERE workload_id = ?", [summary["workload_id"]]).iloc[0]
    assert wl["family"] == "transformer" and wl["name"] == arch and wl["sharder"] is None
    info = summary["info"]
    assert info["head"] == "classification" and info["parameters"] > 0
    # the overrides reached the model whatever the config calls them (n_embd, d_model, ...)
    assert 32 in info["model_config"].values() and 1 in info["model_config"].values()
    traces = store.query("SELECT t.rank, t.kind FROM v_traces t JOIN trace_sets s USING (trace_set_id) "
                         "WHERE s.run_id = ? ORDER BY t.rank, t.kind", [run_id])
    expected = [] if arch == "opt" else [(r, k) for r in range(world_size) for k in ("et", "kineto")]
    assert list(traces.itertuples(index=False, name=None)) == expected
    if arch != "opt":
        ops = store.query("SELECT DISTINCT o.name FROM trace_ops o JOIN v_traces t USING (trace_id) "
                          "JOIN trace_sets s USING (trace_set_id) WHERE s.run_id = ?", [run_id])["name"]
        assert ops.str.startswith("aten::").any()
        assert (world_size == 1) or ops.str.contains("allreduce").any()  # DDP's gradient all-reduce
    assert store.scalar("SELECT count(*) FROM embedding_batch_stats WHERE run_id = ?", [run_id]) == 0
