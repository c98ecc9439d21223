"""Shared fixtures: a fresh workspace per test, the shared data folder (skipped when absent)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "true")

from pmdb.config import Workspace  # noqa: E402
from pmdb.store import Store  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    ws = Workspace(tmp_path / "ws")
    Store.open(ws, create=True).close()
    return ws


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
def gpu_trace(store, shared_data):
    """``gpu_trace(name, platform, et=True)``: the shared GPU trace folder ``traces/gpu/<name>`` (its Kineto trace,
    and its execution trace with ``et``) imported as a trace set of the imported cuda ``platform``; the trace set id.
    Skips when the folder is absent."""
    from collectors.traces.ingest import RankTraces, ingest_trace_set
    from pmdb import platform as platforms

    def load(name: str, platform: str, *, et: bool = True) -> int:
        folder = shared_data / "traces" / "gpu" / name
        if not folder.is_dir():
            pytest.skip(f"{folder} not present")
        platforms.ensure_named(store, platform, device_kind="cuda")
        with store.run("trace", platform, {}) as run:
            ranks = [RankTraces(0, folder / "kineto.json.gz", folder / "et.json.gz" if et else None)]
            return ingest_trace_set(store, run.run_id, platform, ranks, label=name, source="imported")
    return load


@pytest.fixture
def interactive_sigint():
    """SIGINT raises KeyboardInterrupt in this process for the test, as in a terminal: a test run started in the
    background by a non-interactive shell (as CI may be) inherits SIGINT ignored, and pmdb leaves it so."""
    import signal
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)
