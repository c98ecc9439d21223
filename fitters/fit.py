"""Orchestration of `pmdb fit`: for every selected group (kernel op/pass/implementation/dtype/cache state, or
collective/world size) and family, fit on the training split, score on the test split, log and register the
version, then move ``champion`` to the family with the lowest GMAE on a validation part of the training side
(:mod:`fitters.selection`: the test split is never seen by a choice).

Families per group: kernel ops get roofline (when the platform's peaks are measured), mlp and gbdt; embedding
lookups get the DeepSets model (``--family mlp`` selects it as ``embedding_mlp``) and the analytic sum of work terms
(``--family roofline`` selects it as ``embedding_linear``); collectives get ``sigmoid``.

The learned families' searches are bounded by counted work, not by the clock: ``FitOptions.train_config`` (mlp and
DeepSets: candidates and epochs per candidate) and ``FitOptions.gbdt_trials``, so a fit is a function of its data and
seed. ``budget_minutes`` is only a safety cap on the time the learned searches take together (logging, figures and
the analytic families do not count; with a pool of workers, the wall time since they started): a search still
running when it is spent is cut short (later ones train one candidate for ``min_epochs``); each version so cut says
``budget_hit`` (its model description, the MLflow tag ``pmdb.budget_hit``, the fit run's summary) and the fit
prints a warning.

With ``jobs`` > 1 (`pmdb fit --jobs N`, default: the usable cores, at most 4) the learned searches run in worker
processes, up to ``AHEAD_PER_JOB`` x ``jobs`` ahead of the task being registered (:mod:`fitters.fit_pool`, from
``POOL_MIN_TASKS`` learned searches on), each scored there too (:mod:`fitters.selection`); the versions, their numbers, their models and
their scores are those of ``--jobs 1``.

Each version's figures (:mod:`fitters.plots`) are drawn by a second process while the next model fits
(:mod:`fitters.figure_worker`, from ``FIGURE_WORKER_MIN_TASKS`` planned fits on: starting it costs about a second),
and attached to the version's MLflow run as they are ready; every one is attached before champions move.

GPU device timings (cache state ``device``, e.g. imported NeuSight tables) hold forward kernels only: after the
forward GEMM groups (fully_connected, bmm) are fitted, a platform without backward rows of that op gets a
``gemm_shapes`` version of the backward pass, the forward champion priced over the two backward GEMMs (the input and
weight gradients, :mod:`fitters.gemm_shapes`). It has no test metrics (nothing was measured) and is the champion of
its name; the simulator finds it like any (op, 'bwd') model.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from fitters import collective as coll, data, gemm_shapes, plots, roofline, selection, work
from fitters.evaluate import data_hash, error_histogram, replicate_gmae, test_metrics
from fitters.figure_worker import FigureWorker
from fitters.fit_pool import FitPool
from fitters.model import Model, TrainConfig, TrainingSet
from fitters.registry import (Registry, VersionRecord, choose_champion, collective_model_name,
                              kernel_model_name)
from fitters.split import Split, split_collective, split_rows
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

FAMILIES = ("roofline", "mlp", "gbdt", "sigmoid", "all")
CACHES = ("warm", "cold", "both")
MIN_KERNEL_ROWS = 10          # rows (after dropping bad times) a kernel model needs
MIN_CONFIGS = 5               # distinct configurations, so both sides of the split have some
LEARNED = ("mlp", "gbdt", "embedding_mlp")   # families whose search the counted work bounds (and the cap may cut)
DEFAULT_BUDGET_MINUTES = 4.0  # safety cap (min) on a fit's learned searches together, well above the default work
GEMM_BACKWARD_OPS = ("fully_connected", "bmm")   # forward GEMM groups whose backward pass gemm_shapes prices
FIGURE_WORKER_MIN_TASKS = 6   # fewer planned fits draw their figures in this process
POOL_MIN_TASKS = 8            # fewer learned searches run in this process (starting workers costs seconds)
AHEAD_PER_JOB = 2             # searches in flight per worker: one running, one queued while the fit registers


@dataclass
class FitOptions:
    """What `pmdb fit` asked for."""

    ops: list[str] | None = None          # op or collective names; None = all
    family: str = "all"
    cache: str = "both"
    budget_minutes: float = DEFAULT_BUDGET_MINUTES
    seed: int = 0
    train_config: TrainConfig = work.TRAIN   # mlp/DeepSets counted work: candidates, epochs per candidate
    gbdt_trials: int = work.GBDT_TRIALS      # gbdt candidates per search
    progress: bool = True
    figure_worker: bool | None = None   # draw figures in a second process; None: when FIGURE_WORKER_MIN_TASKS fits
    jobs: int = 1                       # processes the learned searches run in (fitters.fit_pool)


def counted_work(trials: int | None = None, max_epochs: int | None = None) -> dict[str, Any]:
    """FitOptions fields for `pmdb fit --trials N --max-epochs E`: ``trials`` candidates per search of every learned
    family, ``max_epochs`` epochs per mlp/DeepSets candidate; None keeps the default (:mod:`fitters.work`)."""
    for flag, value in (("--trials", trials), ("--max-epochs", max_epochs)):
        if value is not None and value < 1:
            raise PmdbError(f"bad {flag} {value}: must be at least 1")
    config = work.TRAIN
    if trials is not None:
        config = dataclasses.replace(config, max_trials=trials)
    if max_epochs is not None:
        config = dataclasses.replace(config, max_epochs=max_epochs, min_epochs=min(config.min_epochs, max_epochs))
    return {"train_config": config, "gbdt_trials": work.GBDT_TRIALS if trials is None else trials}


@dataclass
class Task:
    """One (group, family) to fit."""

    group: data.KernelGroup | data.CollectiveGroup
    family: str


def _families_for(group: data.KernelGroup | data.CollectiveGroup, family: str, has_peaks: bool) -> list[str]:
    if isinstance(group, data.CollectiveGroup):
        return ["sigmoid"] if family in ("sigmoid", "all") else []
    if group.embedding:  # the analytic family answers to --family roofline, like the kernels' analytic model
        return [f for f, asked in (("embedding_linear", ("roofline", "all")), ("embedding_mlp", ("mlp", "all")))
                if family in asked]
    wanted = ["roofline", "mlp", "gbdt"] if family == "all" else [family] if family != "sigmoid" else []
    return [f for f in wanted if f != "roofline" or has_peaks]


def _too_small(group: data.KernelGroup | data.CollectiveGroup) -> str | None:
    if isinstance(group, data.CollectiveGroup):
        sizes = group.rows.loc[group.rows["split_kind"] == "equal", "max_rank_bytes"].nunique()
        train_sizes = sizes - sizes // 5
        if train_sizes < coll.MIN_SIZES:
            return f"{group.label}: {sizes} message sizes ({train_sizes} to train on, need {coll.MIN_SIZES})"
        return None
    rows, configs = len(group.rows), group.rows["config_key"].nunique()
    if rows < MIN_KERNEL_ROWS or configs < MIN_CONFIGS:
        return (f"{group.label}: {rows} rows, {configs} configurations "
                f"(need {MIN_KERNEL_ROWS} rows and {MIN_CONFIGS} configurations)")
    return None


def plan(store: Store, platform: str, options: FitOptions) -> tuple[list[Task], list[str], dict[str, float]]:
    """(tasks, notes on skipped groups, platform peaks). Raises PmdbError when nothing can be fitted."""
    if options.family not in FAMILIES:
        raise PmdbError(f"bad --family {options.family!r}: use {', '.join(FAMILIES)}")
    if options.cache not in CACHES:
        raise PmdbError(f"bad --cache {options.cache!r}: use {', '.join(CACHES)}")
    kernel_ops, collectives = data.op_names(store, platform)
    if options.ops:
        unknown = [o for o in options.ops if o not in kernel_ops and o not in collectives]
        if unknown:
            raise PmdbError(f"no measurements of {', '.join(unknown)} on platform {platform} (ops: "
                            f"{', '.join(kernel_ops) or 'none'}; collectives: {', '.join(collectives) or 'none'})")
    caches = None if options.cache == "both" else [options.cache, "device"]
    groups: list[data.KernelGroup | data.CollectiveGroup] = []
    if options.family != "sigmoid":
        groups += data.kernel_groups(store, platform, options.ops, caches)
    if options.family in ("sigmoid", "all"):
        groups += data.collective_groups(store, platform, options.ops)
    small = [reason for reason in map(_too_small, groups) if reason]
    if small and options.ops:
        raise PmdbError("too little data to fit (nothing was fitted): " + "; ".join(small))
    peaks = data.peaks(store, platform)
    notes = [f"skipped {reason}" for reason in small]
    has_peaks = all(peaks.get(p) for p in roofline.REQUIRED_PEAKS)
    if not has_peaks and options.family in ("roofline", "all"):
        notes.append("no roofline models: the platform's peaks (gemm_flops, mem_bw) are not measured")
    tasks = [Task(g, f) for g in groups if _too_small(g) is None for f in _families_for(g, options.family, has_peaks)]
    if not tasks:
        what = ", ".join(options.ops) if options.ops else "anything"
        raise PmdbError(f"nothing to fit for {what} on platform {platform} with --family {options.family} "
                        f"--cache {options.cache}" + (f" ({'; '.join(notes)})" if notes else ""))
    return tasks, notes, peaks


def _kernel_split(group: data.KernelGroup, seed: int) -> Split:
    return split_rows(group.rows["config_key"], seed)


def fit_kernel_group(group: data.KernelGroup, family: str, peaks: dict[str, float], seed: int = 0,
                     budget_s: float = float("inf"), config: TrainConfig = work.TRAIN,
                     gbdt_trials: int = work.GBDT_TRIALS) -> tuple[Model, Split, tuple[float | None, int]]:
    """One kernel group's model of ``family`` fitted on the training side of the seeded split by configuration, as
    `pmdb fit` does (the test side is never seen); returns (model, split, (validation GMAE, validation
    configurations): what `pmdb fit` chooses the champion by, :mod:`fitters.selection`) for scoring the test side.
    The work is ``config`` (default: `pmdb fit`'s) and ``gbdt_trials``; ``budget_s`` (s) only a safety cap."""
    split = _kernel_split(group, seed)
    training = _training_set(group, split.train, peaks)
    model = _fit_family(family, training, seed, budget_s, config, gbdt_trials)
    return model, split, _validation(family, model, training, seed, budget_s, config, gbdt_trials)


def _validation(family: str, model: Model, training: TrainingSet, seed: int, budget_s: float,
                config: TrainConfig, gbdt_trials: int) -> tuple[float | None, int]:
    """:func:`fitters.selection.validation_score` of ``model``, a refit being the family's whole fit."""
    return selection.validation_score(
        model, training, seed, lambda part: _fit_family(family, part, seed, budget_s, config, gbdt_trials))


def _fit_and_score(family: str, training: TrainingSet, seed: int, budget_s: float, config: TrainConfig,
                   gbdt_trials: int) -> tuple[Model, tuple[float | None, int]]:
    """(model, its validation score): one learned search and the refits that score it, as a pool worker runs them."""
    model = _fit_family(family, training, seed, budget_s, config, gbdt_trials)
    return model, _validation(family, model, training, seed, budget_s, config, gbdt_trials)


def _poolable(task: Task) -> bool:
    """A learned search of a kernel or embedding group: what a fit worker runs (the rest is quick)."""
    return task.family in LEARNED and isinstance(task.group, data.KernelGroup)


def _training_set(group: data.KernelGroup, rows: np.ndarray, peaks: dict[str, float]) -> TrainingSet:
    return TrainingSet(group.op, group.pass_, group.dtype, group.params.iloc[rows].reset_index(drop=True),
                       group.rows["median_us"].to_numpy(dtype=float)[rows],
                       group.rows["config_key"].to_numpy()[rows], peaks)


def _fit_family(family: str, training: TrainingSet, seed: int, budget_s: float, config: TrainConfig,
                gbdt_trials: int = work.GBDT_TRIALS) -> Model:
    """The ``family`` model of one training set (what a fit worker runs: module level, so it pickles by name)."""
    # imported here: torch and skops take seconds to import and a collectives-only fit needs neither
    if family == "roofline":
        return roofline.fit(training, seed)
    if family == "gbdt":
        from fitters import gbdt
        return gbdt.fit(training, seed, budget_s, gbdt_trials)
    if family == "mlp":
        from fitters import mlp
        return mlp.fit(training, seed, budget_s, config)
    if family == "embedding_linear":
        from fitters import embedding_linear
        return embedding_linear.fit(training, seed)
    from fitters import embedding
    return embedding.fit(training, seed, budget_s, config)


class Fitter:
    """Runs the planned tasks inside one `fit` run and registers every version."""

    def __init__(self, store: Store, workspace: Workspace, platform: str, options: FitOptions):
        self.store, self.workspace, self.platform, self.options = store, workspace, platform, options
        self.registry = Registry(workspace, store)  # refuses when the registry lost mirrored versions
        self.results: list[dict[str, Any]] = []
        self._models: dict[tuple[str, int], Model] = {}   # this run's kernel models by (name, version)
        self._figure_worker: FigureWorker | None = None
        self.budget_hit: list[str] = []   # name:version of this run's versions whose search the cap cut short
        self.search_seconds = 0.0         # wall time the learned searches took so far (what the cap counts)
        self._pool_started: float | None = None   # with a pool, the cap counts wall time from its start

    def run(self, tasks: list[Task], peaks: dict[str, float], fit_run_id: str) -> list[dict[str, Any]]:
        cap_s = self.options.budget_minutes * 60
        by_group: dict[int, list[Task]] = {}
        for task in tasks:
            by_group.setdefault(id(task.group), []).append(task)
        bar = tqdm(total=len(tasks), desc="fit", unit="model", disable=not self.options.progress, leave=False)
        fitted: list[tuple[str, data.KernelGroup | data.CollectiveGroup]] = []
        use_worker = self.options.figure_worker
        if use_worker is None:
            use_worker = len(tasks) >= FIGURE_WORKER_MIN_TASKS
        ordered = [task for group_tasks in by_group.values() for task in group_tasks]
        waiting = collections.deque(i for i, task in enumerate(ordered) if _poolable(task))   # not yet submitted
        use_pool = self.options.jobs > 1 and len(waiting) >= POOL_MIN_TASKS
        ahead: dict[int, Any] = {}   # task index -> its search in flight in the pool
        with tempfile.TemporaryDirectory() as tmp:
            # an error or Ctrl-C leaves the block: the workers stop, figures drawn by then are attached
            with (FigureWorker(Path(tmp) / "worker", self.registry.attach_figures) if use_worker
                  else contextlib.nullcontext()) as worker, \
                    (FitPool(self.options.jobs) if use_pool else contextlib.nullcontext()) as pool:
                self._figure_worker = worker
                self._pool_started = time.monotonic() if pool is not None else None
                index = 0
                for group_tasks in by_group.values():
                    group = group_tasks[0].group
                    names = set()
                    for task in group_tasks:
                        bar.set_description(f"fit {group.label} {task.family}")
                        budget_s = max(cap_s - self._spent(), 0.0)   # what is left of the cap
                        trained = None
                        if pool is not None:
                            self._submit_ahead(pool, ordered, waiting, ahead, peaks, cap_s)
                            if index in ahead:
                                trained = pool.result(ahead.pop(index), f"{group.label} {task.family}")
                                # the freed worker takes the next search while this one is registered
                                self._submit_ahead(pool, ordered, waiting, ahead, peaks, cap_s)
                        names.add(self._fit_one(task, peaks, budget_s, fit_run_id, Path(tmp), trained))
                        bar.update()
                        index += 1
                    fitted += [(name, group) for name in sorted(names)]
                if worker is not None:
                    bar.set_description("fit: attaching the last figures")
                    worker.finish()
            self._figure_worker = None
        bar.close()
        # champions move only once every planned fit is done: an interrupted fit leaves them where they were
        for name, group in fitted:
            champion = choose_champion(self.store, name, fit_run_id)
            if champion is None:
                continue
            self.registry.set_champion(self.store, name, champion)
            for row in self.results:
                if row["name"] == name:
                    row["champion"] = row["version"] == champion
            if isinstance(group, data.KernelGroup) and self._wants_backward(group):
                self._gemm_backward(group, name, champion, fit_run_id)
        return self.results

    def _spent(self) -> float:
        """Seconds of the cap spent: the learned searches' own time on one process; with a pool (searches side by
        side) the wall time since it started."""
        return self.search_seconds if self._pool_started is None else time.monotonic() - self._pool_started

    def _submit_ahead(self, pool: FitPool, ordered: list[Task], waiting: collections.deque[int],
                      ahead: dict[int, Any], peaks: dict[str, float], cap_s: float) -> None:
        """Keep ``AHEAD_PER_JOB`` x ``pool.jobs`` learned searches in flight (a worker that finishes finds the next
        one queued while this process registers), the next ones in task order (``waiting``: the indices not
        yet submitted, so the task being registered is in flight or first); each is given what is left of the cap
        when it is submitted."""
        while waiting and len(ahead) < AHEAD_PER_JOB * pool.jobs:
            i = waiting.popleft()
            task, seed = ordered[i], self.options.seed
            training = _training_set(task.group, _kernel_split(task.group, seed).train, peaks)
            ahead[i] = pool.submit(_fit_and_score, task.family, training, seed, max(cap_s - self._spent(), 0.0),
                                   self.options.train_config, self.options.gbdt_trials)

    def _wants_backward(self, group: data.KernelGroup) -> bool:
        """A forward GEMM group of device timings on a platform that has no backward rows of the op."""
        if group.op not in GEMM_BACKWARD_OPS or group.pass_ != "fwd" or group.cache_state != "device":
            return False
        return not self.store.scalar(
            "SELECT count(*) FROM v_op_measurements WHERE platform = ? AND op = ? AND pass = 'bwd' "
            "AND implementation = ? AND dtype = ?", [self.platform, group.op, group.implementation, group.dtype])

    def _gemm_backward(self, group: data.KernelGroup, forward_name: str, champion: int, fit_run_id: str) -> None:
        """Register the backward pass of a forward GEMM group as its champion over the backward GEMMs."""
        base = self._models.get((forward_name, champion))
        base_row = self.store.query("SELECT family, data_hash, n_train, n_dropped FROM model_versions "
                                    "WHERE name = ? AND version = ?", [forward_name, champion]).iloc[0]
        if base is None:
            from fitters.load import load_model
            base = load_model(self.workspace, forward_name, champion)
        started = time.monotonic()
        bounds = gemm_shapes.trained_bounds(group.params.iloc[_kernel_split(group, self.options.seed).train])
        model = gemm_shapes.GemmShapesModel(base, group.op, "bwd", str(base_row["family"]), bounds)
        record = VersionRecord(
            kernel_model_name(self.platform, group.op, "bwd", group.implementation, group.dtype, group.cache_state),
            self.platform, group.op, "gemm_shapes", pass_="bwd", implementation=group.implementation,
            dtype=group.dtype, cache_state=group.cache_state)
        record.seed, record.data_hash = self.options.seed, str(base_row["data_hash"])
        record.n_train, record.n_dropped = int(base_row["n_train"]), int(base_row["n_dropped"])
        record.data_runs = sorted(group.rows["run_id"].unique().tolist())
        record.fit_seconds = round(time.monotonic() - started, 3)
        split = {"test": "none: no backward timings; the forward champion priced over the backward GEMMs",
                 "base": f"{forward_name}:{champion} ({base_row['family']})", "id_column": "measurement_id"}
        version = self.registry.log_version(self.store, fit_run_id, record, model, [], split)
        self.registry.set_champion(self.store, record.name, version)
        self.results.append({"name": record.name, "version": version, "family": record.family, "op": record.op,
                             "pass": record.pass_, "cache_state": record.cache_state, "world_size": None,
                             "test_gmae": float("nan"), "test_mape": float("nan"), "test_std": float("nan"),
                             "replicate_gmae": float("nan"),
                             "n_train": record.n_train, "n_test": 0, "dropped": record.n_dropped,
                             "seconds": round(time.monotonic() - started, 2), "champion": True, "budget_hit": False})

    def _fit_one(self, task: Task, peaks: dict[str, float], budget_s: float, fit_run_id: str, tmp: Path,
                 trained: tuple[Model, float] | None = None) -> str:
        """Fit (or take the pool's ``trained`` ((model, validation score), seconds)), score, register and draw one
        version."""
        group, seed = task.group, self.options.seed
        started = time.monotonic()
        if isinstance(group, data.CollectiveGroup):
            split = split_collective(group.rows["max_rank_bytes"], group.rows["split_kind"])
            sizes = group.rows["max_rank_bytes"].to_numpy(dtype=float)
            times = group.rows["lat_us"].to_numpy(dtype=float)
            model: Model = coll.fit(group.collective, group.world_size, sizes[split.train], times[split.train])
            validation, validation_configs = None, None    # one family per collective: nothing to choose
            frame = group.rows[["max_rank_bytes"]]
            ids, inputs = group.rows["collective_id"], group.rows[["max_rank_bytes", "split_kind"]]
            record = VersionRecord(collective_model_name(self.platform, group.collective, group.world_size),
                                   self.platform, group.collective, "sigmoid", world_size=group.world_size)
        else:
            split = _kernel_split(group, seed)
            training = _training_set(group, split.train, peaks)
            if trained is None:
                model, (validation, validation_configs) = _fit_and_score(
                    task.family, training, seed, budget_s, self.options.train_config, self.options.gbdt_trials)
            else:
                model, (validation, validation_configs) = trained[0]
            frame, times = group.params, group.rows["median_us"].to_numpy(dtype=float)
            ids, inputs = group.rows["measurement_id"], group.params
            record = VersionRecord(
                kernel_model_name(self.platform, group.op, group.pass_, group.implementation, group.dtype,
                                  group.cache_state), self.platform, group.op, task.family, pass_=group.pass_,
                implementation=group.implementation, dtype=group.dtype, cache_state=group.cache_state)
        fit_seconds = time.monotonic() - started if trained is None else trained[1]
        if task.family in LEARNED:
            self.search_seconds += fit_seconds
        predicted = model.predict(frame.iloc[np.concatenate([split.train, split.test])].reset_index(drop=True))
        pred_train, pred_test = predicted[:split.train.size], predicted[split.train.size:]
        record.seed, record.n_dropped = seed, group.dropped
        record.n_train, record.n_test = int(split.train.size), int(split.test.size)
        record.data_runs = sorted(group.rows["run_id"].iloc[split.train].unique().tolist())
        record.data_hash = data_hash(ids.iloc[split.train], inputs.iloc[split.train], times[split.train])
        record.metrics = test_metrics(pred_test, times[split.test])
        record.validation_gmae, record.validation_configs = validation, validation_configs
        if not isinstance(group, data.CollectiveGroup):  # the noise floor beside the test error (µs rows only)
            record.metrics["replicate_gmae"] = replicate_gmae(self.store, ids.iloc[split.test])
        record.histogram = error_histogram(pred_test, times[split.test])
        record.fit_seconds = round(fit_seconds, 3)
        jobs = self._figures(tmp, record, model, group, split, times, pred_train, pred_test)
        worker = self._figure_worker
        split_ids = {"train_ids": ids.iloc[split.train].astype(int).tolist(),
                     "test_ids": ids.iloc[split.test].astype(int).tolist(),
                     "id_column": "collective_id" if isinstance(group, data.CollectiveGroup) else "measurement_id"}
        figures = [] if worker is not None else [job.draw() for job in jobs]
        version, mlflow_run_id = self.registry.log_version_run(self.store, fit_run_id, record, model, figures,
                                                               split_ids)
        budget_hit = model.budget_hit   # also the run's param model.budget_hit
        if budget_hit:
            self.registry.client.set_tag(mlflow_run_id, "pmdb.budget_hit", "true")
            self.budget_hit.append(f"{record.name}:{version}")
        if worker is not None:
            worker.submit(mlflow_run_id, f"{record.name} version {version}", jobs)
        if record.pass_ is not None:
            self._models[(record.name, version)] = model
        self.results.append({"name": record.name, "version": version, "family": record.family, "op": record.op,
                             "pass": record.pass_, "cache_state": record.cache_state,
                             "world_size": record.world_size, "test_gmae": record.metrics["gmae"],
                             "test_mape": record.metrics["mape"], "test_std": record.metrics["std"],
                             "validation_gmae": float("nan") if validation is None else validation,
                             "replicate_gmae": record.metrics.get("replicate_gmae", float("nan")),
                             "n_train": record.n_train, "n_test": record.n_test, "dropped": record.n_dropped,
                             "seconds": round(time.monotonic() - started, 2), "champion": False,
                             "budget_hit": budget_hit})
        return record.name

    def _figures(self, tmp: Path, record: VersionRecord, model: Model, group: Any, split: Split,
                 times: np.ndarray, pred_train: np.ndarray, pred_test: np.ndarray) -> list[plots.FigureJob]:
        """The version's figures as data (drawn here or by the worker): the scatter, and a collective's curve."""
        stem = f"{record.name}.{record.family}".replace("/", "_")
        title = f"{record.op} {record.pass_ or f'ws{record.world_size}'} {record.family}"
        out = [plots.FigureJob("scatter", tmp / f"{stem}.scatter.png",
                               {"measured_test": times[split.test], "predicted_test": pred_test,
                                "measured_train": times[split.train], "predicted_train": pred_train},
                               {"title": title, "histogram": record.histogram})]
        if isinstance(model, coll.CollectiveModel):
            sizes = group.rows["max_rank_bytes"].to_numpy(dtype=float)
            grid = np.geomspace(max(sizes.min(), 1.0), sizes.max(), 400)
            out.append(plots.FigureJob(
                "collective_curve", tmp / f"{stem}.curve.png",
                {"sizes_train": sizes[split.train], "times_train": times[split.train],
                 "sizes_test": sizes[split.test], "times_test": times[split.test], "curve_sizes": grid,
                 "curve_times": model.predict(pd.DataFrame({"max_rank_bytes": grid}))},
                {"title": f"{record.op} ws{record.world_size} ({group.backend})",
                 "boundaries": [float(model.params.m1), float(model.params.m2)]}))
        return out


def fit_models(store: Store, workspace: Workspace, platform: str, options: FitOptions) -> tuple[pd.DataFrame, list[str]]:
    """Plan, then fit everything inside one `fit` collection run. Returns (one row per new version, notes)."""
    tasks, notes, peaks = plan(store, platform, options)
    args = {"ops": options.ops, "family": options.family, "cache": options.cache,
            "budget_minutes": options.budget_minutes, "seed": options.seed,
            "trials": options.train_config.max_trials, "max_epochs": options.train_config.max_epochs,
            "gbdt_trials": options.gbdt_trials, "jobs": options.jobs}
    with store.run("fit", platform, args) as run:
        fitter = Fitter(store, workspace, platform, options)
        fitter.registry.champions_on_completion(store, run)   # champions move only if the fit completes
        with fitter.registry.parent_run(platform, fit_command(platform, options), run.run_id) as totals:
            results = fitter.run(tasks, peaks, run.run_id)
            run.summary = {"versions": len(results), "champions": sum(r["champion"] for r in results),
                           "skipped": notes, "dropped_rows": int(sum({id(t.group): t.group.dropped for t in tasks}
                                                                      .values())),
                           "budget_hit": fitter.budget_hit}
            totals.update(versions=run.summary["versions"], champions=run.summary["champions"],
                          budget_hit=len(fitter.budget_hit))
            import mlflow   # noqa: PLC0415  (the parent run is active here)
            mlflow.set_tag("pmdb.budget_hit", str(bool(fitter.budget_hit)).lower())
    fitter.registry.publish_champions()
    if fitter.budget_hit:
        print(budget_warning(options, fitter.budget_hit, sum(t.family in LEARNED for t in tasks)), file=sys.stderr)
    return pd.DataFrame(results), notes


def budget_warning(options: FitOptions, hit: list[str], learned: int) -> str:
    """The warning (two lines of < 80 columns) a fit prints when its --budget-minutes cap cut searches short (their
    models then depend on the machine's speed and load, not only on the data and seed; the run's summary names
    them)."""
    return (f"pmdb: warning: the --budget-minutes {options.budget_minutes:g} cap cut {len(hit)} of {learned} "
            f"searches short;\n  their models (budget_hit) depend on the machine's speed, not only on the data\n"
            f"  and seed: raise --budget-minutes or lower --trials/--max-epochs")


def fit_command(platform: str, options: FitOptions, most_ops: int = 4) -> str:
    """The `pmdb fit` command line that asked for ``options`` (the name of its MLflow parent run)."""
    ops = options.ops or []
    shown = " ".join(f"--op {op}" for op in ops[:most_ops]) + (f" (+{len(ops) - most_ops} ops)"
                                                                if len(ops) > most_ops else "")
    extra = "".join(f" --{key} {value}" for key, value, default in
                    (("family", options.family, "all"), ("cache", options.cache, "both")) if value != default)
    return f"pmdb fit --platform {platform} {shown or '--all'}{extra}"
