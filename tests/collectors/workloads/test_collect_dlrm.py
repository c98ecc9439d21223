"""DLRM ground truth and traces on real ranks (gloo), stored in a real DuckDB store."""
from __future__ import annotations

import json

import numpy as np
import pytest

from collectors.workloads.collect import collect_workload
from collectors.workloads.ground_truth import summarise
from collectors.workloads.requests import dlrm_request
from collectors.workloads.sharders import COSTS, SHARDERS, shard

pytestmark = pytest.mark.slow


def run(store, platform, **opts):
    request = dlrm_request(store, {"timeout_s": 180, "threads": 1, **opts})  # 1 thread: robust on a busy machine
    summary = collect_workload(store, platform, request, {k: str(v) for k, v in opts.items()})
    run_id = store.scalar("SELECT run_id FROM collection_runs ORDER BY started_at DESC LIMIT 1")
    return request, summary, run_id


def test_world_size_1_ground_truth_stats_and_traces(store, local_platform, tiny_dlrm):
    request, summary, run_id = run(store, local_platform, config=tiny_dlrm, iters=4, warmup=1, trace_iters=2)
    e2e = store.query("SELECT * FROM v_e2e_measurements WHERE run_id = ? ORDER BY iteration", [run_id])
    assert e2e["rank"].tolist() == [0] * 4 and e2e["iteration"].tolist() == [0, 1, 2, 3]
    assert (e2e["time_us"] > 0).all()
    wr = store.query("SELECT * FROM v_workload_runs WHERE run_id = ?", [run_id]).iloc[0]
    assert wr["measured_us"] == pytest.approx(float(np.median(e2e["time_us"])))
    assert wr["iterations"] == 4 and wr["warmup"] == 1 and "libc" in wr["allocator"]
    stats = store.query("SELECT * FROM v_embedding_batch_stats WHERE run_id = ?", [run_id])
    assert len(stats) == 4 * 5 and set(stats["rank"]) == {0} and set(stats["iteration"]) == {0, 1, 2, 3}
    assert (stats["workload_id"] == summary["workload_id"]).all()
    assert set(stats.loc[stats["table_index"] == 2, "index_source"]) == {"zipf:1.05"}
    for _, row in stats.iterrows():
        assert abs(sum(row["reuse_factors"]) - 1) < 1e-9 and len(row["reuse_factors"]) == 17
    # the measured pooling follows each table's L (Poisson around it over 16 samples)
    mean_l = stats.groupby("table_index")["pooling_mean"].mean()
    assert mean_l[4] > mean_l[1]
    traces = store.query("SELECT rank, kind, profiled_with, iterations FROM v_traces t JOIN trace_sets s "
                         "USING (trace_set_id) WHERE s.run_id = ? ORDER BY kind", [run_id])
    assert traces["kind"].tolist() == ["et", "kineto"] and set(traces["iterations"]) == {2}
    markers = store.query("SELECT DISTINCT marker FROM trace_iterations ORDER BY marker")["marker"].tolist()
    assert markers == ["ProfilerStep#1", "ProfilerStep#2"]
    assert summary["trace_bytes"]["rank0"]["kineto"] > 10_000
    assert not (store.workspace.artifacts / "tmp" / run_id).exists()


@pytest.mark.parametrize("sharder", SHARDERS)
def test_world_size_2_each_sharder(store, local_platform, tiny_dlrm, sharder):
    request, summary, run_id = run(store, local_platform, config=tiny_dlrm, world_size=2, sharder=sharder,
                                   iters=3, warmup=1, seed=3, no_trace=sharder != "naive", trace_iters=2)
    expected = shard(sharder, request.config.tables, 2, seed=3)
    if sharder in COSTS:  # greedy: the heaviest table under this cost rule went to rank 0
        costs = [COSTS[sharder](t) for t in request.config.tables]
        assert expected[int(np.argmax(costs))] == 0
    wl = store.query("SELECT * FROM workloads WHERE workload_id = ?", [summary["workload_id"]]).iloc[0]
    assert wl["sharder"] == sharder and list(eval(wl["sharding"])) == expected and wl["world_size"] == 2
    e2e = store.query("SELECT rank, iteration, time_us FROM v_e2e_measurements WHERE run_id = ?", [run_id])
    assert sorted(e2e["rank"].value_counts().items()) == [(0, 3), (1, 3)]
    per_rank = [e2e[e2e["rank"] == r].sort_values("iteration")["time_us"].tolist() for r in (0, 1)]
    assert summary["measured_us"] == pytest.approx(summarise(per_rank)["measured_us"])
    stats = store.query("SELECT table_index, rank FROM v_embedding_batch_stats WHERE run_id = ?", [run_id])
    assert len(stats) == 3 * 5
    assert all(rank == expected[t] for t, rank in stats.itertuples(index=False))
    traced = store.query("SELECT t.rank, t.kind FROM v_traces t JOIN trace_sets s USING (trace_set_id) "
                         "WHERE s.run_id = ?", [run_id])
    assert len(traced) == (4 if sharder == "naive" else 0)
    if sharder == "naive":
        assert sorted(traced.itertuples(index=False)) == [(0, "et"), (0, "kineto"), (1, "et"), (1, "kineto")]


def test_sharding_file_places_tables_and_a_rank_may_hold_none(store, local_platform, tiny_dlrm, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text("[1, 1, 1, 1, 1]")
    request, summary, run_id = run(store, local_platform, config=tiny_dlrm, world_size=2, sharding=plan_file,
                                   iters=2, warmup=1, no_trace=True)
    assert request.sharder == "file" and request.plan == (1, 1, 1, 1, 1)
    assert set(store.query("SELECT rank FROM embedding_batch_stats WHERE run_id = ?", [run_id])["rank"]) == {1}
    assert summary["measured_us"] > 0


def test_same_shape_reuses_the_workload_row(store, local_platform, tiny_dlrm):
    _, first, _ = run(store, local_platform, config=tiny_dlrm, iters=2, warmup=0, no_trace=True)
    _, again, _ = run(store, local_platform, config=tiny_dlrm, iters=2, warmup=0, no_trace=True)
    _, other, _ = run(store, local_platform, config=tiny_dlrm, iters=2, warmup=0, no_trace=True, batch_size=8)
    assert first["workload_id"] == again["workload_id"] != other["workload_id"]
    assert store.scalar("SELECT count(*) FROM v_workload_runs") == 3


def test_torch_embedding_bag_option(store, local_platform, tiny_dlrm):
    request, summary, run_id = run(store, local_platform, config=tiny_dlrm, world_size=2, iters=2, warmup=1,
                                   embedding="torch_embedding_bag", index_source="zipf:1.2", no_trace=True)
    assert request.config.embedding == "torch_embedding_bag"
    sources = store.query("SELECT DISTINCT index_source FROM embedding_batch_stats WHERE run_id = ?", [run_id])
    assert sources["index_source"].tolist() == ["zipf:1.2"]


def test_a_stored_task_runs_with_its_world_size(store, local_platform):
    from collectors.workloads.tasks import generate

    row = generate(1, 5, 2, memory_bytes=2**30, kind="normal", dim=8, max_rows=500)[0]
    task_id = store.insert_one("tasks", row, returning="task_id")
    request, summary, run_id = run(store, local_platform, task=task_id, batch_size=8, iters=2, warmup=1,
                                   no_trace=True, sharder="lookup_greedy")
    assert request.world_size == 2 and len(request.config.tables) == len(row["tables"])
    assert request.config.bottom_mlp[-1] == 8
    wl = store.query("SELECT task_id, world_size FROM workloads WHERE workload_id = ?", [summary["workload_id"]])
    assert wl.iloc[0].tolist() == [task_id, 2]
    stats = store.query("SELECT table_index, num_rows, index_source FROM embedding_batch_stats WHERE run_id = ? "
                        "AND iteration = 0 ORDER BY table_index", [run_id])
    assert stats["num_rows"].tolist() == [t["num_rows"] for t in row["tables"]]
    assert set(stats["index_source"]) == {"zipf:1.05"}


def test_repeats_launch_fresh_processes_and_store_the_median_of_their_medians(store, local_platform, tiny_dlrm):
    request, summary, run_id = run(store, local_platform, config=tiny_dlrm, world_size=2, iters=3, warmup=1,
                                   repeats=3, trace_iters=2)
    e2e = store.query("SELECT rank, iteration, time_us FROM v_e2e_measurements WHERE run_id = ?", [run_id])
    assert len(e2e) == 3 * 3 * 2 and sorted(set(e2e["iteration"])) == list(range(9))
    worst = e2e.groupby("iteration")["time_us"].max()
    medians = [float(np.median(worst[k * 3:(k + 1) * 3])) for k in range(3)]
    assert summary["launch_medians_us"] == pytest.approx([round(m, 1) for m in medians], abs=0.06)
    stored = store.scalar("SELECT measured_us FROM v_workload_runs WHERE run_id = ?", [run_id])
    assert stored == pytest.approx(float(np.median(medians)))
    assert summary["launch_spread"] == pytest.approx((max(medians) - min(medians)) / stored)
    # the traces and the per-batch statistics come from the first launch only
    traced = store.query("SELECT t.rank, t.kind FROM v_traces t JOIN trace_sets s USING (trace_set_id) "
                         "WHERE s.run_id = ?", [run_id])
    assert len(traced) == 4
    assert store.scalar("SELECT count(*) FROM v_embedding_batch_stats WHERE run_id = ?", [run_id]) == 3 * 5
    # rank 0 of every launch probed the host's memory pace before its warm-up and after its iterations
    assert len(summary["memory_probe"]) == 3 * 2 and all(p["read_us"] > 0 for p in summary["memory_probe"])
    assert [p["at"] for p in summary["memory_probe"]] == sorted(p["at"] for p in summary["memory_probe"])
    # and its compute pace on one thread, as `collect ops` does (simulator.compute_phase)
    wakes = summary["wake_probe"]
    assert len(wakes) == 3 * 2 and all(p["back_to_back_us"] > 0 and p["op"] == wakes[0]["op"] for p in wakes)
    stored = json.loads(store.scalar("SELECT summary FROM collection_runs WHERE run_id = ?", [run_id]))
    assert stored["wake_probe"] == wakes


def test_repeats_below_one_is_refused_before_a_run(store, local_platform, tiny_dlrm):
    from pmdb.errors import PmdbError

    with pytest.raises(PmdbError, match="--repeats must be >= 1"):
        dlrm_request(store, {"config": tiny_dlrm, "repeats": 0})


def test_launches_stop_once_their_medians_agree(store, local_platform, tiny_dlrm):
    """With --min-repeats the launches stop as soon as their medians agree (a tolerance no launches can miss stops
    at the minimum; a zero tolerance runs every launch unless they are identical)."""
    from dataclasses import replace

    from collectors.workloads.collect import launches_agree

    assert launches_agree([100.0, 102.0, 101.0], 0.03) and not launches_agree([100.0, 104.0, 101.0], 0.03)
    request = dlrm_request(store, {"timeout_s": 180, "threads": 1, "config": tiny_dlrm, "iters": 2, "warmup": 1,
                                   "repeats": 3, "min_repeats": 2, "trace_iters": 0, "no_trace": True})
    stopped = collect_workload(store, local_platform, replace(request, launch_tolerance=10.0), {})
    assert len(stopped["launch_medians_us"]) == 2
    every = collect_workload(store, local_platform, replace(request, launch_tolerance=0.0), {})
    medians = every["launch_medians_us"]
    assert len(medians) == 3 or launches_agree(medians[:2], 0.0)
    from pmdb.errors import PmdbError

    with pytest.raises(PmdbError, match="--min-repeats must not exceed --repeats"):
        dlrm_request(store, {"config": tiny_dlrm, "repeats": 2, "min_repeats": 3})
