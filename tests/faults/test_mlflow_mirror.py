"""The MLflow registry and the store's mirror disagree: mlflow.db deleted, replaced by a fresh one holding a stray
"v1", model files gone, a version the store never mirrored, champions apart. Commands that use the registry refuse
with one line (and create nothing); `pmdb doctor` says what is wrong and `pmdb doctor --repair` re-registers what
it can under the same numbers, never a second v1."""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from pmdb import platform as platforms
from pmdb.config import Workspace
from pmdb.store import Store

from harness import copy_workspace, forget_mlflow

PLATFORM = "mirror-cpu"
NAME = f"fully_connected.fwd.cold~{PLATFORM}"
FIT = ["fit", "--op", "fully_connected", "--family", "roofline", "--platform", PLATFORM, "--no-progress"]


def pmdb(home: Path, *args: str) -> tuple[int, str, str]:
    """``pmdb --home HOME ARGS`` as a new process runs it: MLflow keeps its stores and engines per URI within a
    process, so once mlflow.db changed under a test, what this process holds of MLflow is dropped first
    (:func:`harness.forget_mlflow`, :func:`test_a_replaced_mlflow_db_is_read_anew_once_forgotten`) and the command
    runs in this process (:func:`cli`; a `pmdb` process would import MLflow afresh: seconds). The refusals before
    that, which open no MLflow store, and read-only `doctor` run by :func:`cli` directly."""
    forget_mlflow()
    return cli(home, *args)


def cli(home: Path, *args: str) -> tuple[int, str, str]:
    """``pmdb --home HOME ARGS`` in this process: (exit code, stdout, stderr)."""
    from pmdb.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *args])
    return code, out.getvalue(), err.getvalue()


def refused(result: tuple[int, str, str], pattern: str) -> str:
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("pmdb: error: ") and pattern in lines[0], err
    return lines[0]


def build_fitted_twice(tmp_path_factory, mlflow_template: Workspace) -> tuple[Workspace, Path]:
    """A workspace with 40 fully_connected timings (a known roofline law) and peaks, fitted twice: v1 and v2, and
    the empty MLflow store it started from (the test run's ``mlflow_template``, tests/conftest.py: its creation is
    tested in test_registry_creation.py). Built once per test run (tests/faults/conftest.py ``fitted_twice_once``,
    shared with the modules that import :func:`fitted_twice`); tests get copies (:func:`ws`)."""
    empty_mlflow_db = mlflow_template.mlflow_db
    ws = Workspace(tmp_path_factory.mktemp("fitted_twice") / "ws")
    rng = np.random.default_rng(0)
    with Store.open(ws, create=True) as store:
        platforms.ensure_named(store, PLATFORM, device_kind="cpu")
        with store.run("peaks", PLATFORM) as run:
            store.insert("platform_peaks", [
                {"platform": PLATFORM, "run_id": run.run_id, "metric": "gemm_flops", "dtype": "float32",
                 "value": 4e10},
                {"platform": PLATFORM, "run_id": run.run_id, "metric": "mem_bw", "dtype": "float32", "value": 8e9}])
        with store.run("ops", PLATFORM) as run:
            for i in range(40):
                m, n, k = (int(v) for v in rng.choice([16, 64, 256, 1024], 3))
                cfg = {"B": 1, "M": m, "N": n, "K": k + i}
                us = 8 + max(2 * m * n * cfg["K"] / 4e10, 4 * (m * cfg["K"] + cfg["K"] * n + m * n) / 8e9) * 1e6
                store.insert_one("op_measurements", {
                    "run_id": run.run_id, "platform": PLATFORM, "op": "fully_connected", "pass": "fwd",
                    "implementation": "torch", "dtype": "float32", "device": "cpu", "cache_state": "cold",
                    "params": cfg, "config_key": hashlib.sha256(json.dumps(cfg).encode()).hexdigest(),
                    "median_us": us * float(np.exp(rng.normal(0, 0.03))), "threads": 1})
    shutil.copy(empty_mlflow_db, ws.mlflow_db)
    for _ in range(2):
        code, _, err = cli(ws.home, *FIT)
        assert code == 0, err
    return ws, empty_mlflow_db


@pytest.fixture
def fitted_twice(fitted_twice_once) -> Workspace:
    """:func:`build_fitted_twice`'s workspace (read only)."""
    return fitted_twice_once[0]


@pytest.fixture
def empty_mlflow_db(fitted_twice_once) -> Path:
    """An empty MLflow sqlite store, created (and migrated) once: copying it saves seconds per test (read only)."""
    return fitted_twice_once[1]


@pytest.fixture
def ws(tmp_path, fitted_twice) -> Workspace:
    """This test's own copy of :func:`fitted_twice` (DuckDB store, mlflow.db, model files)."""
    return Workspace(copy_workspace(fitted_twice.home, tmp_path / "ws"))


def mirror(ws: Workspace) -> dict[int, str]:
    with Store.open(ws, read_only=True) as store:
        return dict(store.conn.execute("SELECT version, mlflow_run_id FROM model_versions WHERE name = ?",
                                       [NAME]).fetchall())


def aliases(ws: Workspace) -> dict[str, int]:
    with Store.open(ws, read_only=True) as store:
        return dict(store.conn.execute("SELECT alias, version FROM model_aliases WHERE name = ?", [NAME]).fetchall())


def registered(ws: Workspace, name: str = NAME) -> dict[int, str]:
    """Live versions of ``name`` in mlflow.db (read with sqlite3: no pmdb code in between)."""
    with contextlib.closing(sqlite3.connect(ws.mlflow_db)) as conn:
        return dict(conn.execute("SELECT version, run_id FROM model_versions WHERE name = ? AND current_stage <> "
                                 "'Deleted_Internal'", [name]).fetchall())


def mlflow_champion(ws: Workspace) -> int | None:
    with contextlib.closing(sqlite3.connect(ws.mlflow_db)) as conn:
        row = conn.execute("SELECT version FROM registered_model_aliases WHERE name = ? AND alias = 'champion'",
                           [NAME]).fetchone()
    return row and row[0]


def doctor(ws: Workspace, *args: str, run=pmdb) -> tuple[int, list[str]]:
    code, out, err = run(ws.home, "doctor", *args)
    assert "Traceback" not in err, err
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines if not line.lstrip().startswith("fix:")), out
    return code, lines


def line_of(lines: list[str], check: str) -> str:
    return next(line for line in lines if line[8:].startswith(check + " "))


@pytest.mark.slow  # repairs and fits after mlflow.db changed under them (MLflow forgotten first): 2-10 s here
def test_deleted_mlflow_db_is_refused_then_repaired_under_the_same_numbers(ws):
    before = mirror(ws)
    assert sorted(before) == [1, 2] and registered(ws) == before
    ws.mlflow_db.unlink()
    line = refused(cli(ws.home, *FIT), "holds 0 of the 2 versions the store lists")
    assert "pmdb --home" in line and "doctor" in line
    assert not ws.mlflow_db.exists()  # nothing was started afresh
    refused(cli(ws.home, "predict", "--all", "--target-platform", PLATFORM), "holds 0 of the 2 versions")
    refused(cli(ws.home, "models", "promote", NAME, "1"), "holds 0 of the 2 versions")
    assert mirror(ws) == before and aliases(ws)["champion"] == 2 and not ws.mlflow_db.exists()
    code, out, err = cli(ws.home, "status")  # a reader says so too (and still shows the store)
    assert code == 0 and out.splitlines()[1].startswith("warning: the MLflow registry") and "doctor" in out

    code, lines = doctor(ws, run=cli)
    assert code == 1
    assert line_of(lines, "registry").startswith("problem") and "missing" in line_of(lines, "registry")
    assert any(line.strip() == f"fix: pmdb --home {ws.home} doctor --repair" for line in lines)
    assert line_of(lines, "tables").startswith("ok")

    code, lines = doctor(ws, "--repair")
    assert code == 0, lines
    assert any("re-registered 2 versions" in line for line in lines)
    after = mirror(ws)
    assert registered(ws) == after and sorted(after) == [1, 2]
    assert set(after.values()).isdisjoint(before.values())  # new MLflow runs, recorded in the mirror
    assert mlflow_champion(ws) == aliases(ws)["champion"] == 2
    code, _, err = pmdb(ws.home, *FIT)
    assert code == 0, err
    assert sorted(mirror(ws)) == [1, 2, 3] and registered(ws) == mirror(ws)


@pytest.mark.slow  # repairs and fits after mlflow.db changed under them (MLflow forgotten first): 2-10 s here
def test_a_stray_v1_in_a_fresh_mlflow_db_is_set_aside_not_mixed_with_the_stores(ws, tmp_path, empty_mlflow_db):
    """What pmdb did before the guard: a fresh mlflow.db, a fit registering "v1" again, then failing."""
    from mlflow import MlflowClient

    fresh = tmp_path / "fresh.db"
    shutil.copy(empty_mlflow_db, fresh)
    client = MlflowClient(f"sqlite:///{fresh}", f"sqlite:///{fresh}")
    run = client.create_run(client.create_experiment("stray"), tags={"pmdb.fit_run": "no-such-run"})
    client.create_registered_model(NAME)
    client.create_model_version(NAME, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id)
    shutil.move(fresh, ws.mlflow_db)  # the workspace's mlflow.db replaced by the fresh one
    assert registered(ws) == {1: run.info.run_id}

    refused(cli(ws.home, *FIT), "holds 0 of the 2 versions")
    code, lines = doctor(ws, run=cli)
    assert code == 1 and "(1 differ)" in line_of(lines, "registry")
    code, lines = doctor(ws, "--repair")
    assert code == 0, lines
    assert registered(ws) == mirror(ws)
    with contextlib.closing(sqlite3.connect(ws.mlflow_db)) as conn:
        (aside,), = conn.execute("SELECT name FROM registered_models WHERE name LIKE ?", [NAME + ".displaced-%"])
    assert registered(ws, aside) == {1: run.info.run_id}  # set aside, not deleted


@pytest.mark.slow  # repairs and fits after mlflow.db changed under them (MLflow forgotten first): 2-10 s here
def test_versions_whose_files_are_gone_are_marked_lost_and_numbers_stay_taken(ws):
    with Store.open(ws, read_only=True) as store:
        uri = store.scalar("SELECT model_uri FROM model_versions WHERE name = ? AND version = 2", [NAME])
    (logged,) = ws.mlflow_artifacts.glob(f"*/models/{uri.split('/')[-1]}")
    shutil.rmtree(logged)
    code, lines = doctor(ws, run=cli)
    assert code == 1 and line_of(lines, "files").startswith("problem")
    ws.mlflow_db.unlink()
    code, lines = doctor(ws, "--repair")
    assert code == 0, lines
    assert "v2: model files gone, marked lost-v2; it was the champion" in " ".join(" ".join(lines).split())
    assert aliases(ws).get("lost-v2") == 2 and "champion" not in aliases(ws)
    assert sorted(registered(ws)) == [1]  # v2's number is taken by a deleted placeholder
    with Store.open(ws) as store:
        from fitters.load import select_models
        from pmdb.errors import PmdbError

        with pytest.raises(PmdbError, match="v2 is marked lost"):
            select_models(store, PLATFORM, versions={NAME: 2})
        assert select_models(store, PLATFORM) == []  # no champion: predict prices fully_connected otherwise
    code, _, err = pmdb(ws.home, *FIT)
    assert code == 0, err
    assert sorted(registered(ws)) == [1, 3] and sorted(mirror(ws)) == [1, 2, 3]
    assert mlflow_champion(ws) == aliases(ws)["champion"] == 3


def test_unmirrored_version_and_moved_champion_are_found_and_repaired(ws):
    from mlflow import MlflowClient

    from fitters.registry import Registry

    Registry(ws)
    client = MlflowClient(ws.mlflow_uri, ws.mlflow_uri)
    with Store.open(ws, read_only=True) as store:
        fit_run = store.scalar("SELECT run_id FROM model_versions WHERE name = ? AND version = 1", [NAME])
    one = client.get_model_version(NAME, "1")
    run = client.create_run(client.get_run(one.run_id).info.experiment_id, tags={"pmdb.fit_run": fit_run})
    client.create_model_version(NAME, one.source, run_id=run.info.run_id)  # v3: a fit that died before mirroring
    client.set_registered_model_alias(NAME, "champion", "1")
    code, lines = doctor(ws, run=cli)
    assert code == 1
    assert line_of(lines, "unmirrored").startswith("problem")
    assert line_of(lines, "champions").startswith("problem")
    code, lines = doctor(ws, "--repair", run=cli)
    assert code == 0, lines
    assert client.get_model_version(NAME, "3").tags.get("pmdb.unmirrored")
    assert mlflow_champion(ws) == aliases(ws)["champion"] == 2


def test_a_replaced_mlflow_db_is_read_anew_once_forgotten(ws, empty_mlflow_db):
    """Why :func:`pmdb` drops this process's MLflow state first: an MLflow store opened here keeps reading the
    mlflow.db it opened after the file was replaced; once forgotten, the next Registry reads the new file."""
    from fitters.registry import Registry

    def names() -> list[str]:
        return [m.name for m in Registry(ws).client.search_registered_models()]
    assert names() == [NAME]
    ws.mlflow_db.unlink()
    shutil.copy(empty_mlflow_db, ws.mlflow_db)   # a store with no models in its place
    assert names() == [NAME]                       # stale: the engine's pooled connection reads the old file
    forget_mlflow()
    assert names() == []
