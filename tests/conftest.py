"""Shared fixtures: a fresh workspace per test, the shared data folder (skipped when absent)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")
# output is judged as a pipe prints it (notes one line each): a test that wants a width sets COLUMNS itself
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

from pmdb.config import Workspace  # noqa: E402
from pmdb.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # tests/harness.py and tests/recording.py import by name
from harness import SHARED_DATA  # noqa: E402  (../shared/data beside the project)


# Folders whose tests share a session fixture that costs tens of seconds of CPU (tests/shard: a real 2-rank
# recording, sweeps and fits): `make test` runs each such folder on one worker, which builds the fixture once.
ONE_WORKER_FOLDERS = ("tests/shard/",)
# Modules sharing a session fixture that costs seconds of CPU, run on one worker for the same reason: the fault
# tests' workspace fitted twice (tests/faults/conftest.py ``fitted_twice_once``).
ONE_WORKER_MODULES = {module: "tests/faults/ (fitted twice)" for module in (
    "tests/faults/test_mlflow_mirror.py", "tests/faults/test_registry_creation.py", "tests/faults/test_killed_fit.py")}


def _work_unit(nodeid: str) -> str:
    """The unit of work of `make test` a test belongs to: its module, its :data:`ONE_WORKER_MODULES` group, or its
    :data:`ONE_WORKER_FOLDERS` folder."""
    module = nodeid.split("::", 1)[0]
    if module in ONE_WORKER_MODULES:
        return ONE_WORKER_MODULES[module]
    return next((folder for folder in ONE_WORKER_FOLDERS if module.startswith(folder)), module)


@pytest.hookimpl(optionalhook=True)   # a pytest-xdist hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``-n 2 --dist loadgroup`` (`make test`): whole modules, and whole :data:`ONE_WORKER_FOLDERS` folders, go to
    one worker each (module and session fixtures built once), handed out in collection order as workers free up.
    (pytest-xdist 3.8's own loadgroup cannot tag pytest 9's node ids, so it ran as plain ``load``.)"""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnits(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)
    return WorkUnits(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Work units (:func:`_work_unit`) with a slow test (marked ``slow``) start first, so that two workers end
    together instead of one waiting on a long last test; each unit's tests keep their order."""
    first = {_work_unit(item.nodeid) for item in items if item.get_closest_marker("slow")}
    first |= set(ONE_WORKER_FOLDERS)
    items.sort(key=lambda item: 0 if _work_unit(item.nodeid) in first else 1)


@pytest.fixture(scope="session")
def empty_workspace(tmp_path_factory) -> Workspace:
    """A new workspace (the store created, every migration applied), made once per test run: read only."""
    ws = Workspace(tmp_path_factory.mktemp("empty") / "ws")
    Store.open(ws, create=True).close()
    return ws


@pytest.fixture
def workspace(tmp_path: Path, empty_workspace: Workspace) -> Workspace:
    """A fresh workspace of this test's own: a copy of :func:`empty_workspace` (creating and migrating a store
    takes about 0.3 s, copying it a millisecond)."""
    from harness import copy_workspace
    return Workspace(copy_workspace(empty_workspace.home, tmp_path / "ws"))


@pytest.fixture(scope="session")
def mlflow_template(tmp_path_factory) -> Workspace:
    """A new workspace whose MLflow sqlite store was created and migrated once per test run (shared by the workers,
    :func:`harness.built_once`): creating one costs about 1 s of CPU (2-3 s with MLflow's first imports), copying
    it a millisecond. Read only."""
    from harness import built_once

    def build(folder: Path) -> None:
        from fitters.registry import Registry

        ws = Workspace(folder / "ws")
        Store.open(ws, create=True).close()
        Registry(ws)
    return Workspace(built_once(tmp_path_factory, "mlflow_template", build) / "ws")


@pytest.fixture
def fit_workspace(workspace: Workspace, mlflow_template: Workspace) -> Workspace:
    """:func:`workspace` with a copy of :func:`mlflow_template`'s (empty) MLflow store: for a test that fits or
    registers models but does not test the MLflow store's creation."""
    import shutil

    shutil.copy(mlflow_template.mlflow_db, workspace.mlflow_db)
    return workspace


@pytest.fixture
def store(workspace: Workspace):
    with Store.open(workspace) as opened:
        yield opened


@pytest.fixture
def shared_data() -> Path:
    """../shared/data of the project root; tests using it skip on a clone without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data not present at {SHARED_DATA} (only on the project's machines)")
    return SHARED_DATA


@pytest.fixture
def gpu_trace(store, shared_data, tmp_path_factory):
    """``gpu_trace(name, platform, et=True)``: :func:`harness.ingest_gpu_trace` into the test's store (the files
    parsed once per test run)."""
    from harness import ingest_gpu_trace

    def load(name: str, platform: str, *, et: bool = True) -> int:
        return ingest_gpu_trace(store, name, platform, et=et, tmp_path_factory=tmp_path_factory)
    return load


@pytest.fixture(scope="session")
def cpu_passes(tmp_path_factory) -> dict[str, Path]:
    """Kineto-only, ET-only and joint (Kineto + ET) passes of a tiny MLP training step, 3 marked iterations
    (:func:`recording.record_cpu_passes`), recorded once per test run (shared by the workers,
    :func:`harness.built_once`) for every folder. Read only."""
    import json

    import recording
    from harness import built_once

    def build(folder: Path) -> None:
        paths = recording.record_cpu_passes(folder)
        (folder / "passes.json").write_text(json.dumps({name: str(path) for name, path in paths.items()}))
    folder = built_once(tmp_path_factory, "cpu_passes", build)
    return {name: Path(path) for name, path in json.loads((folder / "passes.json").read_text()).items()}


@pytest.fixture(scope="session")
def gloo_traces(tmp_path_factory) -> Path:
    """Per rank of a 2-rank gloo program (all_reduce, all_to_all_single; :func:`recording.gloo_rank`):
    kineto_<r>.json and et_<r>.json, recorded once per test run (shared by the workers, :func:`harness.built_once`)
    for every folder. Read only."""
    import recording
    from harness import built_once

    return built_once(tmp_path_factory, "gloo", lambda out: recording.spawn_ranks(recording.gloo_rank, 2, out))


@pytest.fixture
def interactive_sigint():
    """SIGINT raises KeyboardInterrupt in this process for the test, as in a terminal: a test run started in the
    background by a non-interactive shell (as CI may be) inherits SIGINT ignored, and pmdb leaves it so."""
    import signal
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
