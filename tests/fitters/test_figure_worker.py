"""Figures drawn by the second process (:mod:`fitters.figure_worker`): every version of a fit gets the figure
artifacts an in-process fit gives it (the other fit tests draw in-process: they plan fewer fits than
FIGURE_WORKER_MIN_TASKS); a figure that fails and a worker that dies are one clear error, not a hang, and an
interrupted fit stops the worker at once (the versions registered before are kept)."""
import os
import shutil
import signal
import time

import numpy as np
import pandas as pd
import pytest

from fitters import plots
from fitters.evaluate import error_histogram
from fitters.figure_worker import FigureWorker
from fitters.fit import FitOptions, fit_models
from fitters.registry import Registry
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

def _fit(tmp_path, template, synthetic):
    """Two fits with the worker forced on: the analytic kernel family (two cache states: two versions), then the
    collective (scatter and curve); no torch, so the test takes seconds."""
    ws = Workspace(tmp_path / "ws")
    Store.open(ws, create=True).close()
    shutil.copy(template.mlflow_db, ws.mlflow_db)
    with Store.open(ws) as store:
        configs = synthetic.gemm_configs(30)
        for seed, cache in enumerate(("cold", "warm")):
            synthetic.insert_ops(store, "fully_connected", configs, cache_state=cache,
                                 times=list(synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.03, seed)))
        synthetic.insert_peaks(store)
        sizes, times = synthetic.collective_points(sigma=0.02, seed=3)
        synthetic.insert_collectives(store, "all_reduce", 2, sizes, times)
        results = [fit_models(store, ws, synthetic.PLATFORM, FitOptions(family=family, progress=False,
                                                                         figure_worker=True))[0]
                   for family in ("roofline", "sigmoid")]
        rows = store.query("SELECT name, family, version, mlflow_run_id FROM model_versions ORDER BY name, family")
    return ws, pd.concat(results), rows


def _plots(ws: Workspace, run_id: str) -> dict[str, bytes]:
    client = Registry(ws).client
    found = {}
    for entry in client.list_artifacts(run_id, "plots"):
        target = ws.home / "downloads" / run_id
        target.mkdir(parents=True, exist_ok=True)
        local = client.download_artifacts(run_id, entry.path, str(target))
        found[os.path.basename(entry.path)] = open(local, "rb").read()
    return found


def test_every_version_gets_its_figures_from_the_worker(tmp_path, mlflow_template, synthetic):
    ws, results, rows = _fit(tmp_path, mlflow_template, synthetic)
    assert len(results) == len(rows) == 3 and list(rows["family"]) == ["sigmoid", "roofline", "roofline"]
    assert results["champion"].all()
    for row in rows.itertuples():
        drawn = _plots(ws, row.mlflow_run_id)
        expected = {f"{row.name}.{row.family}.scatter.png"} | ({f"{row.name}.{row.family}.curve.png"}
                                                              if row.family == "sigmoid" else set())
        assert set(drawn) == expected  # the names an in-process fit gives them
        assert all(png.startswith(b"\x89PNG") and len(png) > 5000 for png in drawn.values())
        # where the report looks for a version's scatter plot
        assert list(ws.mlflow_artifacts.glob(f"*/{row.mlflow_run_id}/artifacts/plots/*.scatter.png"))


def _job(tmp_path, name: str, histogram: dict | None = None) -> plots.FigureJob:
    measured = np.geomspace(1.0, 1e3, 30)
    return plots.FigureJob("scatter", tmp_path / f"{name}.scatter.png",
                           {"measured_test": measured, "predicted_test": measured * 1.1,
                            "measured_train": measured, "predicted_train": measured * 0.9},
                           {"title": name, "histogram": histogram or error_histogram(measured * 1.1, measured)})


@pytest.fixture
def runs(fit_workspace):
    """Three real (finished) MLflow runs to attach figures to, and the registry."""
    registry = Registry(fit_workspace)
    experiment = registry.experiment_id("figure-test")
    ids = []
    for i in range(3):
        run = registry.client.create_run(experiment, run_name=f"v{i}")
        registry.client.set_terminated(run.info.run_id)
        ids.append(run.info.run_id)
    return registry, ids


def _attached(registry, run_id) -> list[str]:
    return [os.path.basename(a.path) for a in registry.client.list_artifacts(run_id, "plots")]


def test_a_figure_that_fails_is_one_error_naming_its_version(tmp_path, runs):
    registry, ids = runs
    started = time.monotonic()
    with pytest.raises(PmdbError, match=r"^drawing the figures of relu v2 failed in the figure worker: KeyError: "
                                        r"'counts' \(the versions registered so far are kept\)$"):
        with FigureWorker(tmp_path / "worker", registry.attach_figures) as worker:
            worker.submit(ids[0], "relu v1", [_job(tmp_path, "good")])
            worker.submit(ids[1], "relu v2", [_job(tmp_path, "bad", histogram={"labels": []})])
            worker.finish()
    assert time.monotonic() - started < 30
    assert _attached(registry, ids[0]) == ["good.scatter.png"] and _attached(registry, ids[1]) == []
    assert worker._proc.poll() is not None


def test_a_worker_that_dies_is_one_error_not_a_hang(tmp_path, runs):
    registry, ids = runs
    started = time.monotonic()
    with pytest.raises(PmdbError, match=r"^the figure worker ended \(exit code -9\) before drawing the "
                                        r"figures of 1 version\(s\).*\(the versions registered so far are kept\)$"):
        with FigureWorker(tmp_path / "worker", registry.attach_figures) as worker:
            worker.submit(ids[0], "relu v1", [_job(tmp_path, "first")])
            while not _attached(registry, ids[0]) and time.monotonic() - started < 30:
                worker.attach_ready()
                time.sleep(0.05)
            os.kill(worker._proc.pid, signal.SIGKILL)
            worker._proc.wait()
            worker.submit(ids[1], "relu v2", [_job(tmp_path, "second")])
            worker.finish()
    assert time.monotonic() - started < 30
    assert _attached(registry, ids[0]) == ["first.scatter.png"] and _attached(registry, ids[1]) == []


def test_an_interrupted_fit_stops_the_worker_at_once(tmp_path, runs):
    registry, ids = runs
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with FigureWorker(tmp_path / "worker", registry.attach_figures) as worker:
            for run_id in ids:
                worker.submit(run_id, run_id, [_job(tmp_path, run_id)])
            raise KeyboardInterrupt
    assert time.monotonic() - started < 15 and worker._proc.poll() is not None
