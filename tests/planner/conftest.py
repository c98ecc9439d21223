"""Small shapes for the planner tests."""
from __future__ import annotations

import pytest

from planner.candidates import FRAMEWORKS
from planner.model import Transformer
from planner.system import load


@pytest.fixture
def tiny() -> Transformer:
    """A GPT-like model small enough to reason about by hand (s 128, h 256, 4 heads, 4 layers)."""
    return Transformer(name="tiny", seq_len=128, hidden=256, heads=4, layers=4, vocab=1000)


@pytest.fixture
def a100():
    return load("a100")


@pytest.fixture
def planner_fw():
    return FRAMEWORKS["planner"]


@pytest.fixture
def megatron_fw():
    return FRAMEWORKS["megatron-deepspeed"]
