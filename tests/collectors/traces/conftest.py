"""Fixtures of the trace tests: real traces recorded once per session (a CPU training loop in three passes, and a
2-rank gloo program), and a helper to store a trace set in a fresh store."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[2]
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))  # spawned ranks import the recording helper by name

import recording  # noqa: E402


@pytest.fixture(scope="session")
def cpu_passes(tmp_path_factory) -> dict[str, Path]:
    """Kineto-only, ET-only and joint (Kineto + ET) passes of a tiny MLP training step, 3 marked iterations."""
    return recording.record_cpu_passes(tmp_path_factory.mktemp("cpu_passes"))


@pytest.fixture(scope="session")
def gloo_traces(tmp_path_factory) -> Path:
    """Per rank of a 2-rank gloo program (all_reduce, all_to_all_single): kineto_<r>.json and et_<r>.json."""
    out = tmp_path_factory.mktemp("gloo")
    recording.spawn_ranks(recording.gloo_rank, 2, out)
    return out
