"""Fixtures of the simulator tests: a real 2-rank CPU trace set and the shared GPU trace, stored in a workspace."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SHARED_GPU = HERE.parents[2] / "shared" / "data" / "traces" / "gpu"
for _folder in (HERE, HERE.parent):  # sim_store; the recording helper, which spawned ranks import by name
    if str(_folder) not in sys.path:
        sys.path.insert(0, str(_folder))

import recording  # noqa: E402
from sim_store import cpu_ranks, ingest  # noqa: E402

from pmdb import platform as platforms  # noqa: E402
from pmdb.config import Workspace  # noqa: E402
from pmdb.store import Store  # noqa: E402


@pytest.fixture(scope="session")
def cpu_trace_files(tmp_path_factory) -> Path:
    """Kineto and ET files of both ranks of the 2-rank CPU step, recorded once per test run (shared by the workers,
    :func:`harness.built_once`)."""
    from harness import built_once

    return built_once(tmp_path_factory, "cpu_two_ranks",
                      lambda out: recording.spawn_ranks(recording.dlrm_like_rank, 2, out))


@pytest.fixture(scope="session")
def mlp_trace_files(cpu_passes) -> dict[str, Path]:
    """Kineto and ET passes of a one-rank MLP training step (batch 8; :func:`recording.record_cpu_passes`): the
    recording of tests/conftest.py, made once per test run."""
    return cpu_passes


@pytest.fixture(scope="session")
def cpu_trace_workspace(tmp_path_factory, cpu_trace_files, mlflow_template) -> tuple[Workspace, int, str]:
    """(workspace, trace set id, platform): a new workspace holding the 2-rank CPU step, tagged with this machine's
    platform, and an empty MLflow store (:func:`mlflow_template`'s): ingested once per test run (shared by the
    workers, :func:`harness.built_once`; about 1.3 s of CPU per ingest). Read only: tests copy it."""
    import json

    from harness import built_once, copy_workspace

    def build(folder: Path) -> None:
        ws = Workspace(copy_workspace(mlflow_template.home, folder / "ws"))
        with Store.open(ws) as store:
            platform = platforms.resolve(store, None)
            trace_set = ingest(store, platform, cpu_ranks(cpu_trace_files), "two_rank_step", "captured")
        (folder / "set.json").write_text(json.dumps({"trace_set": trace_set, "platform": platform}))
    folder = built_once(tmp_path_factory, "cpu_trace_set", build)
    built = json.loads((folder / "set.json").read_text())
    return Workspace(folder / "ws"), int(built["trace_set"]), str(built["platform"])


@pytest.fixture
def cpu_trace_set(tmp_path, cpu_trace_workspace) -> Iterator[tuple[Store, int, str]]:
    """(store, trace set id, platform) of the 2-rank CPU step, tagged with this machine's platform: the test's own
    copy of :func:`cpu_trace_workspace`, opened."""
    from harness import copy_workspace

    template, trace_set, platform = cpu_trace_workspace
    with Store.open(Workspace(copy_workspace(template.home, tmp_path / "cpu_trace_ws"))) as store:
        yield store, trace_set, platform


@pytest.fixture(scope="module")
def gpu_linear(tmp_path_factory) -> tuple[Workspace, int]:
    """The shared param_linear GPU trace (40 iterations, ET of one) in a workspace of its own (the files parsed
    once per test run, :func:`harness.parsed_gpu_trace`)."""
    from harness import parsed_gpu_trace

    folder = SHARED_GPU / "param_linear"
    if not folder.is_dir():
        pytest.skip(f"shared GPU traces not present at {SHARED_GPU}")
    ws = Workspace(tmp_path_factory.mktemp("gpu_ws") / "ws")
    with Store.open(ws, create=True) as store:
        platform = platforms.ensure_named(store, "gpu-rtx2080ti", device_kind="cuda")
        ts = ingest(store, platform, parsed_gpu_trace(tmp_path_factory, "param_linear"), "param_linear", "imported")
    return ws, ts
