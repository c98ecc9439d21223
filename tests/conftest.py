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
