"""Per-rank traces derived for a plan carry the plan's tables, lookup sizes and all_to_all sizes."""
from __future__ import annotations

import copy

import pytest

from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces import oparg
from shard.derive import derive
from shard.plans import Plan, build_plans, resolve_task
from shard.tables import table_stats
from pmdb.traces.from_store import load_graphs

TRACED_BATCH = 1  # the fixture's capture: 1 warm-up batch, then batch 1 is the traced iteration
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def recorded(shard_ws):
    with Store.open(shard_ws.workspace, read_only=True) as store:
        task = resolve_task(store, tables_file=shard_ws.tiny, world_size=2, batch_size=16)
        graph = load_graphs(store, shard_ws.trace_set_id, pick="best", detail=True)[0]
    return task, graph, table_stats(task, 0, [TRACED_BATCH])


def _lookup_nodes(rank_graph):
    top = [op for op in rank_graph.ops if any("split_embedding" in n.name for n in oparg.walk(op))]
    nodes = [n for op in top for n in oparg.walk(op)]
    fwd = next(n for n in nodes if n.name.endswith("split_embedding_codegen_lookup_sgd_function_pt2"))
    bwd = next(n for n in nodes if n.name.endswith("split_embedding_backward_codegen_sgd_cpu"))
    return fwd, bwd


def test_schema_argument_names():
    schema = ("fbgemm::bounds_check_indices(Tensor rows_per_table, Tensor(a!) indices, Tensor(b!) offsets, "
              "int bounds_check_mode, Tensor?[](e!) aux, int[] sizes=[1, 2], *, SymInt max_B=-1) -> ()")
    assert oparg.arg_names(schema) == ["rows_per_table", "indices", "offsets", "bounds_check_mode", "aux", "sizes",
                                       "max_B"]
    assert oparg.arg_names(None) == []


def test_source_plan_derives_back_to_the_recorded_sizes(shard_ws, recorded):
    task, graph, stats = recorded
    before = copy.deepcopy(graph)
    derived = derive(graph, shard_ws.source_plan, task, Plan("same", shard_ws.source_plan), stats)
    for rank_graph, original in zip(derived.graph.ranks, before.ranks):
        fwd, _ = _lookup_nodes(rank_graph)
        fwd0, _ = _lookup_nodes(original)
        for name in ("indices", "offsets", "D_offsets", "weights"):
            assert oparg.get_shape(fwd, name) == oparg.get_shape(fwd0, name), name
        assert oparg.get_scalar(fwd, "total_D") == oparg.get_scalar(fwd0, "total_D")
        a2a = [op for op in rank_graph.ops if op.collective == "all_to_all"]
        a2a0 = [op for op in original.ops if op.collective == "all_to_all"]
        assert [op.comm_bytes for op in a2a] == [op.comm_bytes for op in a2a0]
        assert [oparg.get_scalar(op, "input_split_sizes") for op in a2a] == \
            [oparg.get_scalar(op, "input_split_sizes") for op in a2a0]


def test_each_plan_carries_its_tables_and_sizes(recorded, shard_ws):
    task, graph, stats = recorded
    recorded_indices = [oparg.get_shape(_lookup_nodes(r)[0], "indices") for r in graph.ranks]
    for plan in build_plans(task, ["size_greedy", "lookup_greedy", "norm_lookup_greedy", "random"], seed=1):
        derived = derive(graph, shard_ws.source_plan, task, plan, stats)
        layout = plan.layout(task)
        assert [oparg.get_shape(_lookup_nodes(r)[0], "indices") for r in graph.ranks] == recorded_indices
        for r, rank_graph in enumerate(derived.graph.ranks):
            tables = layout.tables[r]
            lookups = sum(round(16 * stats[t]["pooling_mean"]) for t in tables)
            fwd, bwd = _lookup_nodes(rank_graph)
            for node in (fwd, bwd):
                assert oparg.get_shape(node, "indices") == [lookups]
                assert oparg.get_shape(node, "offsets") == [16 * len(tables) + 1]
                assert oparg.get_shape(node, "D_offsets") == [len(tables) + 1]
            assert oparg.get_shape(fwd, "weights")[0] == [sum(stats[t]["num_rows"] * 8 for t in tables)]
            assert oparg.get_scalar(fwd, "total_D") == 8 * len(tables)
            assert oparg.get_shape(bwd, "grad_output") == [16, 8 * len(tables)]
            fwd_a2a, bwd_a2a = [op for op in rank_graph.ops if op.collective == "all_to_all"]
            assert oparg.get_scalar(fwd_a2a, "input_split_sizes") == layout.send_splits(r)
            assert oparg.get_scalar(fwd_a2a, "output_split_sizes") == layout.recv_splits(r)
            assert oparg.get_scalar(bwd_a2a, "input_split_sizes") == layout.recv_splits(r)
            volume = 4 * max(sum(layout.send_splits(r)), sum(layout.recv_splits(r)))
            assert fwd_a2a.comm_bytes == bwd_a2a.comm_bytes == volume
            held = derived.embedding.per_rank[r]
            assert [s["num_rows"] for s in held] == [task.config.tables[t].num_rows for t in tables]
            assert derived.ranks[r].tables == tables and derived.ranks[r].indices == lookups
        assert derived.graph.measured_us != derived.graph.measured_us  # NaN: the source's time is not the plan's
        # a synchronous exchange's recorded CPU time (wait for the source plan's slowest rank included) is the least
        source_times = [[op.cpu_dur_us for op in r.ops if op.collective == "all_to_all"] for r in graph.ranks]
        derived_times = [[op.cpu_dur_us for op in r.ops if op.collective == "all_to_all"] for r in derived.graph.ranks]
        assert derived_times[0] == derived_times[1] == [min(t) for t in zip(*source_times)]


def test_a_plan_of_another_structure_is_refused(recorded, shard_ws):
    task, graph, stats = recorded
    with pytest.raises(PmdbError, match="structure"):
        derive(graph, shard_ws.source_plan, task, Plan("lopsided", (1, 1, 1, 1, 1)), stats)


def test_an_exchange_the_trace_could_not_link_is_still_rewritten(recorded, shard_ws):
    """An all_to_all that the ET and Kineto did not link keeps only Kineto's record (no schema, no ET scalars; seen in
    a real recording): derivation takes the schema from the same op elsewhere and states the new split sizes."""
    task, graph, stats = recorded
    graph = copy.deepcopy(graph)
    bwd_a2a = [op for op in graph.ranks[1].ops if op.collective == "all_to_all"][1]
    bwd_a2a.attrs.pop("op_schema", None)
    bwd_a2a.attrs.pop("scalars", None)
    assert oparg.get_scalar(bwd_a2a, "input_split_sizes") is None  # unreadable as recorded
    plan = build_plans(task, ["size_greedy", "lookup_greedy"], seed=1)[0]
    derived = derive(graph, shard_ws.source_plan, task, plan, stats)
    layout = plan.layout(task)
    fwd_a2a, bwd_a2a = [op for op in derived.graph.ranks[1].ops if op.collective == "all_to_all"]
    assert oparg.get_scalar(bwd_a2a, "input_split_sizes") == layout.recv_splits(1)
    assert oparg.get_scalar(bwd_a2a, "output_split_sizes") == layout.send_splits(1)
