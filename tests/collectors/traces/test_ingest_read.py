"""Storing and reading a real 2-rank gloo trace set (ranks added one at a time), collective marking, storage-id
edges with the c10d buffer quirks, the trace's own ground truth, and refusals of duplicates."""
import json
import statistics

import pandas as pd
import pytest

from collectors.traces.ingest import RankTraces, add_ranks, ingest_trace_set
from pmdb.traces.rows import load_trace_set, storage_edges, top_level_mask, top_level_of, written_storages
from pmdb import platform
from pmdb.errors import PmdbError

pytestmark = pytest.mark.slow  # spawns two gloo ranks once per session


def _steps(path):
    """(start, duration) of every ProfilerStep span of a Kineto file, in µs."""
    events = json.loads(path.read_text())["traceEvents"]
    return [(e["ts"], e["dur"]) for e in sorted((e for e in events if e.get("ph") == "X"
                                                 and e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])]


@pytest.fixture
def gloo_set(store, gloo_traces):
    name = platform.resolve(store, None)
    ranks = [RankTraces(r, gloo_traces / f"kineto_{r}.json", gloo_traces / f"et_{r}.json") for r in (0, 1)]
    with store.run("trace", name, {}) as run:
        set_id = ingest_trace_set(store, run.run_id, name, ranks[:1], label="gloo")
    with store.run("trace", name, {}) as run:
        add_ranks(store, run.run_id, set_id, ranks[1:])
    return set_id


def test_ranks_added_later_complete_the_set_and_its_ground_truth(store, gloo_traces, gloo_set):
    row = store.query("SELECT world_size, measured_us FROM v_trace_sets WHERE trace_set_id = ?", [gloo_set]).iloc[0]
    per_rank = [_steps(gloo_traces / f"kineto_{r}.json") for r in (0, 1)]
    assert len(per_rank[0]) == len(per_rank[1]) == 3
    assert row["world_size"] == 2
    # per step: from the last rank's entry to the last rank's exit (both ranks' spans overlap: one clock)
    assert all(max(a[0], b[0]) < min(a[0] + a[1], b[0] + b[1]) for a, b in zip(*per_rank))
    expected = statistics.median(max(a[0] + a[1], b[0] + b[1]) - max(a[0], b[0]) for a, b in zip(*per_rank))
    assert row["measured_us"] == pytest.approx(expected)
    assert row["measured_us"] <= statistics.median(max(a[1], b[1]) for a, b in zip(*per_rank)) + 1e-3
    assert store.scalar("SELECT count(DISTINCT run_id) FROM v_traces WHERE trace_set_id = ?", [gloo_set]) == 2
    with pytest.raises(PmdbError, match=r"already holds rank\(s\) \[1\]"):
        add_ranks(store, "unused", gloo_set, [RankTraces(1, gloo_traces / "kineto_1.json", None)])


def test_collectives_threads_and_parents(store, gloo_traces, gloo_set):
    frames = load_trace_set(store, gloo_set)
    for rank, rf in frames.items():
        ops = rf.ops
        coll = ops[ops["is_collective"] & ops["iteration"].notna()]
        assert coll["name"].value_counts().to_dict() == {"c10d::allreduce_": 3, "c10d::alltoall_base_": 3,
                                                         "gloo:all_reduce": 3, "gloo:all_to_all": 3}
        main = ops.loc[ops["name"] == "aten::mul", "thread"].iloc[0]
        assert (coll.loc[coll["name"].str.startswith("c10d::"), "thread"] == main).all()
        gloo = coll[coll["name"].str.startswith("gloo:")]
        assert (gloo["thread"] != main).all() and gloo["thread"].notna().all()
        # Kineto shows gloo work top-level on its own thread; the ET parent (whatever op was open) is kept aside
        assert gloo["parent_id"].isna().all()
        raw = {n["id"]: n["ctrl_deps"] for n in json.loads((gloo_traces / f"et_{rank}.json").read_text())["nodes"]}
        assert [a["ctrl_deps"] for a in gloo["attrs"]] == [raw[i] for i in gloo["op_id"]]
        kernels_and_iters = (len(rf.kernels), len(rf.iterations))
        assert kernels_and_iters == (0, 3)


def test_storage_edges_follow_collective_buffers(store, gloo_traces, gloo_set):
    rf = load_trace_set(store, gloo_set)[0]
    ops = rf.ops.set_index("op_id")
    edges = rf.edges()
    named = {(ops.at[p, "name"], ops.at[c, "name"]) for p, c in zip(edges["producer_id"], edges["consumer_id"])}
    assert {("aten::mul", "c10d::allreduce_"), ("c10d::allreduce_", "aten::add"),
            ("aten::add", "c10d::alltoall_base_"), ("c10d::alltoall_base_", "aten::view")} <= named
    nodes = {n["id"]: n for n in json.loads((gloo_traces / "et_0.json").read_text())["nodes"]}
    for alltoall in ops.index[(ops["name"] == "c10d::alltoall_base_") & ops["iteration"].notna()]:
        receive = nodes[alltoall]["inputs"]["values"][0][1]  # storage id of the output buffer, inputs[0]
        out = edges[edges["producer_id"] == alltoall]
        assert set(out["storage_id"]) == {receive}
        assert ops.at[int(out["consumer_id"].min()), "name"] == "aten::view"
    iteration = dict(zip(rf.ops["op_id"], rf.ops["iteration"]))
    assert all(iteration[p] == iteration[c] for p, c in zip(edges["producer_id"], edges["consumer_id"]))
    top = rf.top_level()
    assert set(edges["producer_id"]) | set(edges["consumer_id"]) <= set(top["op_id"])


def test_views_do_not_write_and_schemas_mark_in_place_writes():
    t = lambda arg, storage: [arg, storage * 10, storage, 0, 4, 4, "cpu"]  # noqa: E731
    ops = pd.DataFrame([
        (1, "aten::mul", "cpu_op", None, {}, [t(0, 1)], [t(0, 2)]),
        (2, "aten::view", "cpu_op", None, {"op_schema": "aten::view(Tensor(a) self, SymInt[] size) -> Tensor(a)"},
         [t(0, 2)], [t(0, 2)]),
        (3, "aten::relu_", "cpu_op", None, {"op_schema": "aten::relu_(Tensor(a!) self) -> Tensor(a!)"},
         [t(0, 2)], [t(0, 2)]),
        (4, "aten::sum", "cpu_op", None, {}, [t(0, 2)], [t(0, 3)]),
    ], columns=["op_id", "name", "category", "parent_id", "attrs", "input_tensors", "output_tensors"])
    edges = storage_edges(ops, level="all")
    assert list(map(tuple, edges.to_numpy().tolist())) == [(1, 2, 2), (1, 3, 2), (3, 4, 2)]
    assert written_storages("c10d::alltoall_base_", {}, [t(0, 7), t(1, 8)], []) == {7}


def test_the_same_imported_file_is_refused(store, gloo_traces):
    name = platform.ensure_named(store, "elsewhere", device_kind="cpu")
    spec = [RankTraces(0, gloo_traces / "kineto_0.json", None)]
    with store.run("trace", name, {}) as run:
        ingest_trace_set(store, run.run_id, name, spec, source="imported")
    with pytest.raises(PmdbError, match=r"kineto_0.json: this content was already imported"):
        with store.run("trace", name, {}) as run:
            ingest_trace_set(store, run.run_id, name, spec, source="imported")


def test_top_level_ops_skip_annotations_and_survive_parent_cycles():
    ops = pd.DataFrame({"op_id": [1, 2, 3, 4, 5, 6, 7],
                        "category": ["user_annotation", "cpu_op", "cpu_op", "cuda_runtime", "cpu_op", "cpu_op",
                                     "cpu_op"],
                        "parent_id": [None, 1, 2, 3, None, 7, 6]})  # 6 <-> 7: a malformed cycle
    assert ops.loc[top_level_mask(ops), "op_id"].tolist() == [2, 5, 7]
    assert top_level_of(ops).tolist()[:5] == [pd.NA, 2, 2, 2, 5]


def test_a_file_of_a_run_that_died_can_be_imported_again(store, gloo_traces):
    name = platform.ensure_named(store, "elsewhere", device_kind="cpu")
    spec = [RankTraces(0, gloo_traces / "kineto_0.json", None)]
    with pytest.raises(KeyboardInterrupt):
        with store.run("trace", name, {}) as run:
            ingest_trace_set(store, run.run_id, name, spec, source="imported")
            raise KeyboardInterrupt  # Ctrl-C after the rows were written
    with store.run("trace", name, {}) as run:
        set_id = ingest_trace_set(store, run.run_id, name, spec, source="imported")
    assert store.scalar("SELECT count(*) FROM v_trace_sets") == 1
    assert store.scalar("SELECT trace_set_id FROM v_traces") == set_id
    assert store.scalar("SELECT count(*) FROM imported_files") == 1
