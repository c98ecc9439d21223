"""`pmdb fit --jobs N`: the learned searches in worker processes give the versions, numbers and models of one
process (a real store, a real MLflow registry, real spawned workers); a worker that dies is one clear error; a fit
that fails stops its busy workers at once."""
import os
import shutil
import time

import numpy as np
import pandas as pd
import pytest

from fitters.fit import POOL_MIN_TASKS, FitOptions, fit_models
from fitters.fit_pool import FitPool, default_jobs
from fitters.load import load_model
from fitters.model import TrainConfig
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

from harness import copy_workspace

SMALL = TrainConfig(max_trials=2, max_epochs=10, patience=10, min_epochs=5)   # two candidates: still a search
PLATFORM = "synthetic-cpu"


def _workspace(tmp_path_factory, template, name: str) -> Workspace:
    ws = Workspace(tmp_path_factory.mktemp(name) / "ws")
    Store.open(ws, create=True).close()
    shutil.copy(template.mlflow_db, ws.mlflow_db)
    return ws


def _filled_twice(tmp_path_factory, template, synthetic) -> tuple[Workspace, Workspace]:
    """Two workspaces holding the same :func:`_fill` rows (the second a copy of the first, made before any fit)."""
    one = _workspace(tmp_path_factory, template, "jobs1")
    with Store.open(one) as store:
        _fill(store, synthetic)
    return one, Workspace(copy_workspace(one.home, tmp_path_factory.mktemp("jobs2") / "ws"))


def _fill(store, synthetic) -> None:
    """Two ops in two cache states: 4 groups, 8 learned searches (mlp, gbdt) and 4 rooflines."""
    for op, seed in (("fully_connected", 1), ("bmm", 2)):
        configs = synthetic.gemm_configs(50, seed=seed)
        for cache_state, scale in (("cold", 1.0), ("warm", 0.8)):
            times = synthetic.noisy([scale * synthetic.gemm_law(c) for c in configs], 0.03, seed)
            synthetic.insert_ops(store, op, configs, list(times), cache_state=cache_state)
    synthetic.insert_peaks(store)


def _fit(ws: Workspace, jobs: int):
    with Store.open(ws) as store:
        return fit_models(store, ws, PLATFORM, FitOptions(budget_minutes=5, train_config=SMALL, gbdt_trials=2,
                                                          progress=False, jobs=jobs))


def test_two_jobs_register_what_one_does(tmp_path_factory, mlflow_template, synthetic):
    one, two = _filled_twice(tmp_path_factory, mlflow_template, synthetic)
    (serial, _), (pooled, _) = _fit(one, 1), _fit(two, 2)
    assert (pooled["family"].isin(["mlp", "gbdt"])).sum() >= POOL_MIN_TASKS   # the pool was used
    columns = ["name", "version", "family", "test_gmae", "test_mape", "n_train", "n_test", "champion"]
    assert serial[columns].equals(pooled[columns])
    # the workers also score their searches for the champion's choice: the same scores as one process
    assert np.allclose(serial["validation_gmae"], pooled["validation_gmae"], equal_nan=True)
    assert serial["validation_gmae"].notna().all()
    with Store.open(two, read_only=True) as store:
        run = store.query("SELECT args FROM collection_runs WHERE kind = 'fit'")
    assert '"jobs": 2' in run["args"].iloc[0]
    frame = pd.DataFrame(synthetic.gemm_configs(20, seed=9)).astype(float)
    learned = serial.loc[serial["family"].isin(["mlp", "gbdt"]), ["name", "version"]]
    for name, version in learned.itertuples(index=False):
        first, second = load_model(one, name, version), load_model(two, name, version)
        assert np.array_equal(first.predict(frame), second.predict(frame)), name


def _die(*_args):
    os._exit(3)


def test_a_worker_that_dies_is_one_error():
    with pytest.raises(PmdbError, match="a fit worker process ended while fitting bmm fwd mlp"):
        with FitPool(1) as pool:
            future = pool.submit(_die, "mlp", None, 0, 1.0, SMALL, 2)
            pool.result(future, "bmm fwd mlp")
    assert 1 <= default_jobs() <= 4


def test_weight_files_kept_by_a_worker_are_the_files_a_save_writes(tmp_path, synthetic):
    """A worker writes a model's weights after its search (``keep_weight_files``); the registering process's
    ``save`` then writes those bytes: the same files, loading to the same predictions as a direct save."""
    from fitters import gbdt
    from fitters.model import TrainingSet, load_dir

    configs = synthetic.gemm_configs(60, seed=4)
    params = pd.DataFrame(configs).astype(float)
    times = synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.03, 4)
    keys = np.arange(len(params)).astype(str)
    model = gbdt.fit(TrainingSet("fully_connected", "fwd", "float32", params, times, keys), seed=0, max_trials=1)
    direct = model.save(tmp_path / "direct")
    model.keep_weight_files()
    assert set(model._weight_files) == {gbdt.WEIGHTS_FILE}
    kept = model.save(tmp_path / "kept")
    assert sorted(p.name for p in kept.iterdir()) == sorted(p.name for p in direct.iterdir())
    assert (kept / "model.json").read_text() == (direct / "model.json").read_text()
    assert np.array_equal(load_dir(kept).predict(params), load_dir(direct).predict(params))


def _sleep(*_args):
    time.sleep(120)


def test_a_fit_that_fails_stops_its_busy_workers_at_once():
    """Leaving the pool on an error kills the workers still searching (their ids come from the workers
    themselves, not from the executor's internals) instead of waiting for their searches."""
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the fit failed"):
        with FitPool(1) as pool:
            pool.submit(_sleep, "mlp", None, 0, 1.0, SMALL, 2)
            deadline = time.monotonic() + 60
            while not pool.worker_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            (pid,) = pool.worker_pids()
            raise RuntimeError("the fit failed")
    assert time.monotonic() - started < 60          # not the two minutes the search would take
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
