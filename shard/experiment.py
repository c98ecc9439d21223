"""``pmdb shard --study``: the paper's sharding experiment (Table IV) over K random heavy tasks.

Task i of seed S is drawn by the tasks generator (:mod:`collectors.workloads.tasks`, kind 'heavy') and stored once
(a task with the same generator seed, world size and tables is reused). Each task's study is validated and runs
under its own 'shard' run, so an interrupted experiment keeps the studies it finished; running the same command
again skips the tasks whose study of this series already completed. The series label names the experiment: its
tasks, batch and table caps, the ground-truth settings, and a digest of the model versions that predict (new models
or another ground truth make a new series).
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import pandas as pd
from tqdm import tqdm

from collectors.workloads.tasks import generate
from pmdb.errors import PmdbError
from pmdb.store import Store
from shard.plans import resolve_task
from shard.study import StudySettings, run_study
from simulator.error_stats import named


@dataclass(frozen=True)
class Experiment:
    """K heavy tasks of seed S at a world size and batch size; table sizes capped for the machine."""

    count: int
    seed: int
    world_size: int
    batch_size: int
    memory_bytes: int
    dim: int = 64
    max_rows: int | None = 100_000
    datasets: Path | None = None

    @property
    def series(self) -> str:
        return (f"heavy ws{self.world_size} b{self.batch_size} seed{self.seed} dim{self.dim} "
                f"rows<={self.max_rows or 'any'}" + (f" data={self.datasets.name}" if self.datasets else ""))


@dataclass
class ExperimentResult:
    """Per task: its study id (None when it failed) and the reason of a failure."""

    series: str = ""
    studies: dict[int, int | None] = field(default_factory=dict)
    failures: dict[int, str] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)
    wall_s: float = 0.0


def ensure_tasks(store: Store, exp: Experiment) -> list[int]:
    """The task ids of tasks 0..K-1 of the experiment (inserted when not stored yet)."""
    rows = generate(exp.count, exp.seed, exp.world_size, memory_bytes=exp.memory_bytes, kind="heavy", dim=exp.dim,
                    datasets=exp.datasets, max_rows=exp.max_rows)
    ids = []
    for row in rows:
        found = store.query("SELECT task_id, tables FROM tasks WHERE seed = ? AND world_size = ? AND kind = 'heavy' "
                            "ORDER BY task_id", [int(row["seed"]), exp.world_size])
        same = [int(t) for t, tables in zip(found["task_id"], found["tables"]) if json.loads(tables) == row["tables"]]
        ids.append(same[0] if same else int(store.insert_one("tasks", row, returning="task_id")))
    return ids


def model_digest(store: Store, platform: str, models: str, cache_state: str | None) -> str:
    """Short digest of the model versions ``models`` selects on ``platform`` (names and versions)."""
    from fitters.load import select_models
    from simulator.model_set import choose_collectives, collective_choice, parse_spec

    alias, versions = parse_spec(models)
    refs = choose_collectives(select_models(store, platform, alias or "champion", versions=versions,
                                            cache_state=cache_state), collective_choice(models)[1])
    text = ",".join(sorted(f"{r.name}:{r.version}" for r in refs))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _done(store: Store, task_id: int, series: str) -> int | None:
    return store.scalar("SELECT max(study_id) FROM v_shard_studies WHERE task_id = ? AND series = ? "
                        "AND success IS NOT NULL", [task_id, series])


def run_experiment(store: Store, platform: str, exp: Experiment, settings: StudySettings,
                   args: dict[str, Any], say: Callable[[str], None] | None = None) -> ExperimentResult:
    """Validated studies of the experiment's tasks (finished ones skipped); failures are recorded, not fatal."""
    say = say or (lambda _m: None)
    gt = settings.run
    series = (f"{exp.series} gt={gt.rounds}x{gt.iters}+{gt.warmup} "
              f"models={model_digest(store, platform, settings.models, settings.cache_state)}")
    settings = replace(settings, validate=True, series=series)
    started = time.perf_counter()
    out = ExperimentResult(series)
    task_ids = ensure_tasks(store, exp)
    for task_id in tqdm(task_ids, desc="sharding study", unit="task", disable=None):
        done = _done(store, task_id, series)
        if done is not None:
            out.studies[task_id] = int(done)
            out.skipped.append(task_id)
            continue
        task = resolve_task(store, task_id=task_id, world_size=exp.world_size, batch_size=exp.batch_size)
        try:
            with store.run("shard", platform, {**args, "task": task_id, "series": series}) as run:
                result = run_study(store, platform, task, settings, run.run_id, say)
                run.summary = {"study_id": result.study_id, "chosen": result.chosen, "fastest": result.fastest,
                               "success": result.success}
            out.studies[task_id] = result.study_id
            say(f"task {task_id}: chose {result.chosen}, fastest {result.fastest} "
                f"({100 * result.chosen_slowdown:+.1f}%): {'success' if result.success else 'miss'}")
        except PmdbError as exc:
            out.studies[task_id] = None
            out.failures[task_id] = str(exc)
            say(f"task {task_id}: failed: {exc}")
    out.wall_s = time.perf_counter() - started
    return out


def series_summary(store: Store, series: str) -> pd.DataFrame:
    """Table IV of a series (the named query report_shard_series): studies, successes, success rate, prediction
    time per plan and the prediction side's wall time (capture + derive + simulate) against running every plan."""
    frame = named(store, "report_shard_series")
    return frame[frame["series"] == series].reset_index(drop=True)
