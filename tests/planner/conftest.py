"""Small shapes for the planner tests."""
from __future__ import annotations

import numpy as np
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


class _Unanswered:
    """Calibrated GEMM and collective models without an answer anywhere."""

    label = "no answers"

    def gemm_time(self, M, N, K, count):
        return np.full(np.broadcast(M, N, K, count).shape, np.nan)

    def collective_time(self, kind, nbytes, group):
        return np.full(np.shape(nbytes), np.nan)


@pytest.fixture
def unanswered() -> _Unanswered:
    """Calibrated models that answer nothing: the timer then prices every op and collective one by one with its
    roofline and ring formulas, each model shape on its own (the path that neither stacks nor merges)."""
    return _Unanswered()

