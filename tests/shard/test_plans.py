"""Plans of a sharding study: the task's shape, the Table III cost rules, plan files, bad input."""
from __future__ import annotations

import json
import math

import pytest

from collectors.workloads.tasks import generate
from pmdb.errors import PmdbError
from shard.derive import structure_key
from shard.plans import build_plans, parse_sharders, resolve_task

TABLES = [{"num_rows": 5000, "pooling": 30}, {"num_rows": 200, "pooling": 80}, {"num_rows": 90000, "pooling": 21},
          {"num_rows": 1200, "pooling": 45}, {"num_rows": 30000, "pooling": 25}, {"num_rows": 700, "pooling": 60},
          {"num_rows": 15000, "pooling": 33}]
RULES = {"size_greedy": lambda t: t.num_rows, "lookup_greedy": lambda t: t.pooling * t.dim,
         "norm_lookup_greedy": lambda t: t.pooling / t.num_rows,
         "size_lookup_greedy": lambda t: t.pooling * t.dim * math.log10(t.num_rows)}


@pytest.fixture
def tables_file(tmp_path):
    path = tmp_path / "seven.json"
    path.write_text(json.dumps(TABLES))
    return path


def test_tables_file_gets_preset_mlps_and_batch(store, tables_file):
    task = resolve_task(store, tables_file=tables_file, world_size=2, batch_size=64)
    assert task.num_tables == 7 and task.dims == [64] * 7 and task.batch_size == task.config.batch_size == 64
    assert task.config.bottom_mlp[-1] == 64 and task.config.top_mlp[-1] == 1 and task.task_id is None
    assert [t.num_rows for t in task.config.tables] == [t["num_rows"] for t in TABLES]


def test_stored_task_uses_its_world_size(store):
    row = generate(1, 5, 3, memory_bytes=2**30, kind="heavy", max_rows=5000)[0]
    task_id = store.insert_one("tasks", row, returning="task_id")
    task = resolve_task(store, task_id=task_id, batch_size=96)
    assert task.world_size == 3 and task.task_id == task_id
    assert [t.pooling for t in task.config.tables] == [t["pooling"] for t in row["tables"]]
    assert all(t.pooling >= 20 for t in task.config.tables)


@pytest.mark.parametrize("sharder", sorted(RULES))
def test_greedy_plans_follow_their_cost_rule(store, tables_file, sharder):
    task = resolve_task(store, tables_file=tables_file, world_size=3, batch_size=96)
    plan = build_plans(task, [sharder, "naive"])[0]
    costs = [RULES[sharder](t) for t in task.config.tables]
    loads = [0.0] * 3
    for t in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):   # replay: each table went to the lightest rank
        lightest = min(range(3), key=lambda r: (loads[r], r))
        assert plan.ranks[t] == lightest, f"{sharder}: table {t} (cost {costs[t]:.3g}) on {plan.ranks[t]}"
        loads[lightest] += costs[t]
    assert max(loads) - min(loads) <= max(costs) + 1e-9


def test_naive_random_and_plan_files(store, tables_file, tmp_path):
    task = resolve_task(store, tables_file=tables_file, world_size=2, batch_size=64)
    own = tmp_path / "mine.json"
    own.write_text(json.dumps({"plan": [1, 1, 0, 0, 1, 0, 1]}))
    plans = {p.sharder: p.ranks for p in build_plans(task, parse_sharders("naive,random"), [own], seed=4)}
    assert plans["naive"] == (0, 1, 0, 1, 0, 1, 0)
    assert plans["file:mine"] == (1, 1, 0, 0, 1, 0, 1)
    again = build_plans(task, ["random", "naive"], seed=4)[0].ranks
    assert plans["random"] == again and set(again) <= {0, 1}
    assert structure_key(task, plans["file:mine"]) == ((True, True), True)
    assert structure_key(task, (0, 0, 0, 0, 1, 1, 1)) == ((True, True), False)   # rank-sorted: no reordering
    assert structure_key(task, (1,) * 7) == ((False, True), False)


def test_every_sharder_by_default():
    assert parse_sharders("all") == parse_sharders(None) == ["naive", "random", "size_greedy", "lookup_greedy",
                                                             "norm_lookup_greedy", "size_lookup_greedy"]


@pytest.mark.parametrize("kwargs, message", [
    ({"world_size": 1}, "world-size >= 2"),
    ({"world_size": 2, "batch_size": 63}, "multiple of the world size"),
    ({"world_size": 2, "task_id": 99}, "exactly one of"),
])
def test_bad_studies_are_refused(store, tables_file, kwargs, message):
    with pytest.raises(PmdbError, match=message):
        resolve_task(store, tables_file=tables_file, **{"batch_size": 64, **kwargs})


def test_bad_sharders_and_files(store, tables_file, tmp_path):
    task = resolve_task(store, tables_file=tables_file, world_size=2, batch_size=64)
    with pytest.raises(PmdbError, match="unknown sharder"):
        parse_sharders("naive,fastest")
    with pytest.raises(PmdbError, match="at least two plans"):
        build_plans(task, ["naive"])
    short = tmp_path / "short.json"
    short.write_text("[0, 1]")
    with pytest.raises(PmdbError, match="gives 2 table placements"):
        build_plans(task, ["naive"], [short])
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps([{"num_rows": 10, "pooling": 2, "dim": 8}, {"num_rows": 10, "pooling": 2}]))
    with pytest.raises(PmdbError, match="same dim"):
        resolve_task(store, tables_file=mixed, world_size=2, batch_size=64)
