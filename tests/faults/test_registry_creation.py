"""The MLflow registry store and a full disk (issue #38, item 5). The first `pmdb fit` creates mlflow.db completely
before any fit work, in a temporary file renamed into place: a full disk (a real child under RLIMIT_FSIZE) fails it
in one line and leaves no mlflow.db, and the same fit succeeds once there is room. A mlflow.db that a real MLflow
schema migration left half-migrated (the old failure) is refused in one line by `pmdb fit`, reported by `pmdb
doctor` and rebuilt from the model files by `pmdb doctor --repair` (the broken file moved aside, not deleted)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from pmdb.config import Workspace

from harness import in_process
from .conftest import Child
from .test_mlflow_mirror import (  # noqa: F401
    FIT, NAME, aliases, fitted_twice, mirror, pmdb, registered, ws)

LIMIT = 400 * 1024   # MLflow's migrated sqlite store is about 950 kB: its creation cannot finish


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def _half_migrated(path: Path) -> None:
    """A mlflow.db as MLflow's own migration leaves it when the disk fills midway (a real MLflow process)."""
    code = (f"from mlflow import MlflowClient\nuri = 'sqlite:///{path}'\n"
            "MlflowClient(tracking_uri=uri, registry_uri=uri).search_experiments(max_results=1)\n")
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
           "PYTHONDONTWRITEBYTECODE": "1"}   # as faults.conftest.Child: no truncated .pyc under the size limit
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                          preexec_fn=_limit_file_size)
    assert done.returncode != 0 and path.is_file(), done.stderr[-500:]


@pytest.mark.slow
def test_a_full_disk_during_the_first_fit_fails_in_one_line_and_leaves_no_registry(ws: Workspace):  # noqa: F811
    for side in ws.home.glob("mlflow.db*"):
        side.unlink()   # the fixture's registry and mirror gone: this is a first fit
    import duckdb

    with duckdb.connect(str(ws.db_path)) as conn:
        conn.execute("DELETE FROM model_aliases")
        conn.execute("DELETE FROM model_versions")
    code, _, err = Child(["--home", str(ws.home), *FIT], preexec_fn=_limit_file_size).finish()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and "Traceback" not in err, err
    assert len(lines) == 1 and "creating the MLflow registry" in lines[0] and "nothing was fitted" in lines[0], err
    assert sorted(p.name for p in ws.home.glob("mlflow.db*")) == []
    code, _, err = pmdb(ws.home, *FIT)   # the same fit with room: as a new process (in this one, MLflow forgotten)
    assert code == 0, err
    assert sorted(mirror(ws)) == [1] and sorted(registered(ws)) == [1]


@pytest.mark.slow
def test_a_half_migrated_registry_is_refused_then_rebuilt_by_repair(ws: Workspace):  # noqa: F811
    versions = mirror(ws)
    assert sorted(versions) == [1, 2]
    for side in ws.home.glob("mlflow.db*"):
        side.unlink()
    _half_migrated(ws.mlflow_db)
    fit = in_process(ws.home, *FIT)   # refused before any MLflow store is opened: in this process
    lines = [line for line in fit.stderr.splitlines() if line.strip()]
    assert fit.returncode == 2 and "Traceback" not in fit.stderr and len(lines) == 1, fit.stderr
    assert "half-migrated" in lines[0] or "holds 0 of the 2 versions" in lines[0], lines[0]
    doctor = in_process(ws.home, "doctor")   # read-only
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr, doctor.stderr
    assert "problem registry   mlflow.db is half-migrated" in doctor.stdout, doctor.stdout
    code, out, err = pmdb(ws.home, "doctor", "--repair")
    assert code == 0 and "Traceback" not in err, out + err
    assert "moved the half-migrated mlflow.db aside" in out
    assert sorted(registered(ws)) == [1, 2] and aliases(ws)["champion"] == 2
    assert list(ws.home.glob("mlflow.db.half-migrated-*"))                 # kept, not deleted
    assert pmdb(ws.home, *FIT)[0] == 0                                      # and fitting goes on: v3
    assert sorted(mirror(ws)) == [1, 2, 3]
