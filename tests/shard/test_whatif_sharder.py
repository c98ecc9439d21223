"""`pmdb predict --what-if --sharder`: sharding plans of the recorded tiny DLRM (2 ranks, plan naive) derived by
shard.derive from its trace set, predicted and stored as derived trace sets; the recorded plan finds its own
measured run and so reaches the end-to-end error views (the report's Fig. 10/11)."""
from __future__ import annotations

import json

import pytest

from collectors.workloads import dlrm_presets, sharders
from pmdb.store import Store
from pmdb.traces import oparg

pytestmark = pytest.mark.slow


def test_sharders_derived_from_the_recorded_plan(shard_ws, capsys):
    ts = shard_ws.trace_set_id
    assert shard_ws.cli("predict", "--what-if", "--trace-set", str(ts), "--sharder", "naive", "--sharder",
                        "size_greedy", "--format", "json") == 0
    rows = {r["plan"]: r for r in json.loads(capsys.readouterr().out)}
    assert sorted(rows) == ["naive", "size_greedy"] and all(r["batch"] == 16 and r["world"] == 2
                                                            for r in rows.values())
    # the recorded plan derived again predicts as the recorded trace set does
    assert rows["naive"]["x_recorded"] == pytest.approx(1.0, abs=0.01)
    with Store.open(shard_ws.workspace, read_only=True) as store:
        sets = store.query("SELECT t.trace_set_id, t.parent_trace_set_id, t.workload_id, t.derivation, t.source "
                           "FROM v_trace_sets t WHERE t.trace_set_id IN (SELECT unnest(?::BIGINT[]))",
                           [[r["trace_set"] for r in rows.values()]])
        assert set(sets["source"]) == {"derived"} and (sets["parent_trace_set_id"] == ts).all()
        recorded_workload = store.scalar("SELECT workload_id FROM trace_sets WHERE trace_set_id = ?", [ts])
        assert (sets["workload_id"] == recorded_workload).all()
        derivation = {json.loads(d)["sharder"]: json.loads(d) for d in sets["derivation"]}
        config = dlrm_presets.from_dict(json.loads(store.scalar("SELECT config FROM workloads WHERE workload_id = ?",
                                                                [recorded_workload])))
        assert derivation["size_greedy"]["plan"] == sharders.shard("size_greedy", config.tables, 2)
        # naive at batch 16 on 2 ranks is the recorded workload, which has a measured run: judged against it
        measured = store.scalar("SELECT measured_us FROM v_workload_runs WHERE workload_id = ?", [recorded_workload])
        assert rows["naive"]["measured_ms"] == pytest.approx(measured / 1000, abs=1e-3)
        assert rows["size_greedy"]["measured_ms"] is None
        listed = store.query("SELECT sharder, batch_size FROM v_prediction_errors WHERE prediction_id = ?",
                             [rows["naive"]["prediction_id"]])
        assert listed.values.tolist() == [["naive", 16]]


def test_a_doubled_batch_with_another_plan(shard_ws, capsys):
    """Batch first, then the plan: the lookups and the exchanges of size_greedy's plan carry twice the batch."""
    from shard.reshard import reshard_hook
    from simulator.whatif_predict import WhatIf, derive, source_set

    ts = shard_ws.trace_set_id
    with Store.open(shard_ws.workspace, read_only=True) as store:
        source = source_set(store, ts)
        hook = reshard_hook(source, "size_greedy")
        same, doubled = (derive(store, source, WhatIf(batch_size=b), detail=True, reshard=hook, sharder="size_greedy")
                         for b in (16, 32))
    for a, b in zip(same.graph.ranks, doubled.graph.ranks):
        exchanges = [(x.comm_bytes, y.comm_bytes) for x, y in zip(a.ops, b.ops) if x.collective == "all_to_all"]
        assert len(exchanges) == 2 and all(2 * x == y for x, y in exchanges)
        lookups = [(oparg.get_shape(x, "offsets"), oparg.get_shape(y, "offsets"))
                   for x, y in zip(_nodes(a), _nodes(b)) if "bounds_check_indices" in x.name]
        assert lookups and all(y[0] - 1 == 2 * (x[0] - 1) for x, y in lookups)   # T·B + 1 entries
    assert [t["batch_size"] for t in doubled.embedding.per_rank[0]] == [32] * len(doubled.embedding.per_rank[0])
    assert doubled.derivation["batch_size"] == [16, 32] and doubled.derivation["sharder"] == "size_greedy"
    assert shard_ws.cli("predict", "--what-if", "--trace-set", str(ts), "--sharder", "size_greedy",
                        "--batch-size", "32", "--format", "json") == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["batch"], row["plan"]) == (32, "size_greedy") and row["predicted_ms"] > 0
    assert shard_ws.cli("predict", "--what-if", "--trace-set", str(ts), "--world-size", "4") == 2
    assert "spreads its tables over the ranks" in capsys.readouterr().err


def _nodes(rank):
    return [node for op in rank.ops for node in oparg.walk(op)]


def test_derived_lookups_become_collector_targets(shard_ws):
    """--measure-shapes' input: a derived configuration's tables in the ops collector's form (sizes and pooling as
    derived, each table's recorded index source), and its batched lookups as embedding targets at the new batch
    holding the plan's tables per rank."""
    from collectors.ops.from_traces import graph_shapes
    from shard.reshard import reshard_hook
    from simulator.whatif_predict import WhatIf, derive, source_set
    from simulator.whatif_shapes import derived_tables

    ts = shard_ws.trace_set_id
    with Store.open(shard_ws.workspace, read_only=True) as store:
        source = source_set(store, ts)
        derived = derive(store, source, WhatIf(batch_size=32), detail=True, reshard=reshard_hook(source, "size_greedy"),
                         sharder="size_greedy")
        tables = derived_tables(store, derived)
        config = dlrm_presets.from_dict(json.loads(store.scalar(
            "SELECT config FROM workloads WHERE workload_id = ?", [source.workload_id])))
    plan = sharders.shard("size_greedy", config.tables, 2)
    assert sorted(tables) == [0, 1]
    for rank, held in tables.items():
        assert sorted(t["E"] for t in held) == sorted(config.tables[i].num_rows for i, r in enumerate(plan)
                                                       if r == rank)
        assert all(t["B"] == 32 and t["L"] > 0 and t["source"] for t in held)
    shapes = graph_shapes([(ts, derived.graph, tables)])
    lookups = [t for t in shapes.targets if t.op == "embedding_lookup"]
    assert lookups and all(t.config["B"] == 32 for t in lookups)
    assert sorted(e for t in lookups for e in t.config["E"]) == sorted(t.num_rows for t in config.tables)
