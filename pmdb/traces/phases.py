"""Training phases of a traced op: forward, backward or optimizer, from its own name and the names of the annotations
(and ops) it runs inside. A measured step is often timed per phase (forward, then ``loss.backward()``), so a
prediction is made per phase too.

Rules, first match wins (names compared case-insensitively):

1. ``optimizer``: an enclosing annotation starts with ``Optimizer.`` (torch's ``Optimizer.step#SGD.step`` and
   ``Optimizer.zero_grad#...``) or names an optimizer phase (contains ``optimizer``);
2. ``bw``: the op is an autograd node (``autograd::engine::evaluate_function: ...``) or runs inside one, or an
   enclosing annotation contains ``backward``;
3. ``loss``: an enclosing annotation is a loss phase marker (``pmdb::phase::loss``, or any name whose last ``::``
   part is ``loss``): the loss between the model call and the backward, which a per-phase measurement times in
   neither;
4. ``fw``: everything else (an enclosing ``forward`` annotation, or none).
"""
from __future__ import annotations

from typing import Iterable

PHASES = ("fw", "loss", "bw", "optimizer")
STEP_RANGE_PREFIX = "Optimizer."   # torch's record_function ranges of an optimizer: Optimizer.step#SGD.step, ...
AUTOGRAD_PREFIX = "autograd::engine::evaluate_function"


def phase_of(name: str, enclosing: Iterable[str]) -> str:
    """The phase of an op called ``name`` whose enclosing annotations/ops are ``enclosing`` (any order)."""
    names = [str(n) for n in enclosing]
    lowered = [n.lower() for n in names]
    if any(n.startswith(STEP_RANGE_PREFIX.lower()) or "optimizer" in n for n in lowered):
        return "optimizer"
    if name.startswith(AUTOGRAD_PREFIX) or any(n.startswith(AUTOGRAD_PREFIX) for n in names) \
            or any("backward" in n for n in lowered):
        return "bw"
    if any(n.rsplit("::", 1)[-1] == "loss" for n in lowered):
        return "loss"
    return "fw"


def optimizer_range(enclosing: Iterable[str]) -> str | None:
    """The innermost of the enclosing names (innermost first) that is one of torch's optimizer ranges
    (``Optimizer.step#SGD.step``, ``Optimizer.zero_grad#...``), else None. Its own host time (the optimizer's Python
    before its first op and after its last) is priced on CPU platforms as the range's T2 and T3."""
    return next((str(n) for n in enclosing if str(n).startswith(STEP_RANGE_PREFIX)), None)
