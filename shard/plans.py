"""What a sharding study compares: the DLRM shape of a task (or a tables file) and one plan per sharder.

A plan places every embedding table on a rank (``ranks[t]``). Table III sharders come from
:mod:`collectors.workloads.sharders` (the same code the workload runner uses, so a plan predicted here is the plan
run by ``--validate``); plan files add explicit placements labelled ``file:<stem>``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from collectors.workloads import dlrm_presets, sharders
from collectors.workloads.dlrm_presets import DlrmConfig
from collectors.workloads.requests import TASK_MLP_PRESET, task_config
from collectors.workloads.sharders import RankLayout, rank_layout
from pmdb.errors import PmdbError
from pmdb.store import Store


@dataclass(frozen=True)
class ShardTask:
    """The DLRM a study is about: its shape (tables included), global batch size, world size and task id."""

    config: DlrmConfig
    batch_size: int
    world_size: int
    task_id: int | None = None

    @property
    def dims(self) -> list[int]:
        return [t.dim for t in self.config.tables]

    @property
    def num_tables(self) -> int:
        return len(self.config.tables)


@dataclass(frozen=True)
class Plan:
    """One placement: ``sharder`` label and the rank of every table."""

    sharder: str
    ranks: tuple[int, ...]

    def layout(self, task: ShardTask) -> RankLayout:
        """Per-rank tables and all_to_all split sizes (elements) of this plan."""
        return rank_layout(list(self.ranks), task.dims, task.world_size, task.batch_size)


def _tables_config(data: Any, mlp_preset: str, source: str) -> DlrmConfig:
    """A DLRM config from a tables file: a full DLRM config (has ``bottom_mlp``), or just tables (a list, or
    ``{"tables": [...]}``) given the MLPs of ``mlp_preset`` with the tables' dimension as bottom-MLP output."""
    if isinstance(data, dict) and "bottom_mlp" in data:
        data.setdefault("name", Path(source).stem)
        return dlrm_presets.from_dict(data, f"tables file {source}")
    tables = data.get("tables") if isinstance(data, dict) else data
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise PmdbError(f"tables file {source}: expected a DLRM config, a list of tables or {{\"tables\": [...]}}")
    dims = {int(t.get("dim", 64)) for t in tables}
    if len(dims) != 1:
        raise PmdbError(f"tables file {source}: every table needs the same dim (the dot interaction), got {sorted(dims)}")
    base = dlrm_presets.preset(mlp_preset)
    return dlrm_presets.from_dict({
        "name": Path(source).stem, "bottom_mlp": [*base.bottom_mlp[:-1], dims.pop()], "top_mlp": list(base.top_mlp),
        "tables": [{k: v for k, v in t.items() if k in ("num_rows", "pooling", "dim", "index_source")}
                   for t in tables]}, f"tables file {source}")


def resolve_task(store: Store, *, task_id: int | None = None, tables_file: Path | None = None,
                 world_size: int | None = None, batch_size: int, mlp_preset: str = TASK_MLP_PRESET) -> ShardTask:
    """The task of ``--task ID`` (tables of a stored task, world size defaulting to the task's) or ``--tables FILE``."""
    if (task_id is None) == (tables_file is None):
        raise PmdbError("give exactly one of --task ID and --tables FILE")
    if task_id is not None:
        config, task_world = task_config(store, int(task_id), mlp_preset)
        world_size = world_size or task_world
    else:
        try:
            data = json.loads(Path(tables_file).read_text())
        except OSError as exc:
            raise PmdbError(f"cannot read tables file {tables_file}: {exc.strerror}") from None
        except ValueError as exc:
            raise PmdbError(f"tables file {tables_file} is not JSON: {exc}") from None
        config = _tables_config(data, mlp_preset, str(tables_file))
    if not world_size or world_size < 2:
        raise PmdbError(f"a sharding study needs --world-size >= 2 (got {world_size})")
    if batch_size < world_size or batch_size % world_size:
        raise PmdbError(f"--batch-size {batch_size} must be a positive multiple of the world size {world_size}")
    if config.embedding != "fbgemm_tbe":
        raise PmdbError(f"sharding studies derive per-rank traces of the batched FBGEMM lookup; the config uses "
                        f"{config.embedding!r} (set \"embedding\": \"fbgemm_tbe\")")
    return ShardTask(replace(config, batch_size=batch_size), batch_size, int(world_size), task_id)


def parse_sharders(text: str | None) -> list[str]:
    """``all`` (or nothing) -> every Table III sharder; else a comma-separated list of them."""
    if text is None or text.strip() in ("", "all"):
        return list(sharders.SHARDERS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    for name in names:
        sharders.check_sharder(name)
    if len(set(names)) != len(names):
        raise PmdbError(f"--sharders {text!r} names a sharder twice")
    return names


def build_plans(task: ShardTask, sharder_names: Sequence[str], plan_files: Sequence[Path] = (),
                seed: int = 0) -> list[Plan]:
    """One plan per sharder (Table III cost rules, ``seed`` for the random one) and per plan file."""
    plans = [Plan(name, tuple(sharders.shard(name, task.config.tables, task.world_size, seed)))
             for name in sharder_names]
    for path in plan_files:
        label = f"file:{Path(path).stem}"
        if any(p.sharder == label for p in plans):
            raise PmdbError(f"two plan files are called {Path(path).stem!r}: rename one")
        plans.append(Plan(label, tuple(sharders.load_plan(Path(path), task.num_tables, task.world_size))))
    if len(plans) < 2:
        raise PmdbError("a sharding study compares at least two plans (give more --sharders or --plan files)")
    for plan in plans:
        plan.layout(task)  # the batch must split evenly: fail before anything runs
    return plans
