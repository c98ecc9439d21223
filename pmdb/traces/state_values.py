"""The values an op reads, where its cost depends on them: the share of exact zeros in an optimizer's state.

Traces carry shapes, not values. A workload run records the share of exact zeros of each optimizer state tensor
(``optimizer_state_stats``, :mod:`collectors.workloads.optimizer_state`); the ops that read a second moment
(:data:`VALUE_SENSITIVE`: the square root an Adam-like step takes of it) get that share as ``Op.zero_frac``, which
the op mapping passes on as parameter ``Z`` (:data:`ZERO_SHARE`). The optimizer step's ops are matched to the
states of their rank in parameter order (:func:`annotate`); a state read at several steps (the start and the end
of the timed iterations) gets the mean over them. Without stored shares (imported traces,
runs before migration 0011) ``zero_frac`` stays 0: the op is priced as on random values.
"""
from __future__ import annotations

import math
import pandas as pd

from pmdb.store import Store
from pmdb.traces.graph import TraceGraph
from pmdb.traces.layout import LAYOUT
from pmdb.traces.oparg import walk


ZERO_SHARE = "Z"                      # the op parameter: share of exact zeros in the input, [0, 1]
VALUE_SENSITIVE = frozenset({"aten::sqrt"})   # traced ops whose cost depends on the zero share they read
SECOND_MOMENTS = ("exp_avg_sq", "max_exp_avg_sq", "square_avg", "sum")  # states optimizers take the root of
# catalogue op -> parameters its rows may lack, with what a missing one means (bmm: its operands' layout)
OPTIONAL = {"sqrt": {ZERO_SHARE: 0.0}, "bmm": {name: 0.0 for name in LAYOUT}}
OPTIMIZER_PHASE = "optimizer"        # Op.phase of the optimizer step's ops (pmdb.traces.phases)
RESOLUTION = 0.01                     # shares are rounded to this: traced and measured configs must match exactly


def rounded(share: float) -> float:
    """A zero share as ops carry it (two decimals; 0 below the resolution)."""
    value = round(float(share) / RESOLUTION) * RESOLUTION
    return round(min(max(value, 0.0), 1.0), 2)


def zero_shares(store: Store, workload_id: int | None) -> dict[int, list[tuple[int, float]]]:
    """rank -> [(element count, mean zero share over the recorded steps)] of the workload's second moments, in the
    optimizer's parameter order (empty: none recorded)."""
    if workload_id is None or pd.isna(workload_id):
        return {}
    frame = store.query(
        "SELECT rank, param_index, any_value(numel) AS numel, avg(zero_frac) AS share FROM optimizer_state_stats "
        f"WHERE workload_id = ? AND state IN ({', '.join('?' * len(SECOND_MOMENTS))}) "
        "GROUP BY rank, param_index ORDER BY rank, param_index", [int(workload_id), *SECOND_MOMENTS])
    out: dict[int, list[tuple[int, float]]] = {}
    for row in frame.itertuples(index=False):
        out.setdefault(int(row.rank), []).append((int(row.numel), float(row.share)))
    return out


def _numel(shape: object) -> int | None:
    if not isinstance(shape, list) or not all(isinstance(d, int) for d in shape):
        return None
    return math.prod(shape)


def annotate(graph: TraceGraph, shares: dict[int, list[tuple[int, float]]]) -> int:
    """Set ``zero_frac`` of the value-sensitive ops of the optimizer step (nested ones too): an optimizer visits its
    parameters in order, so the ops are matched to the recorded states in order, each to the next state of its
    element count (parameters of one size, a position embedding and a projection say, hold different shares).
    Returns how many ops got a share."""
    count = 0
    for rank_graph in graph.ranks:
        states = shares.get(rank_graph.rank, [])
        if not states:
            continue
        at = 0
        for op in (n for top in rank_graph.ops if top.phase == OPTIMIZER_PHASE for n in walk(top)):
            if op.name not in VALUE_SENSITIVE or not op.input_shapes:
                continue
            numel = _numel(op.input_shapes[0])
            match = next((i for i in range(at, len(states)) if states[i][0] == numel), None)
            if match is None:
                continue
            op.zero_frac, at = rounded(states[match][1]), match + 1
            count += 1
    return count


def scaled(share: float, tokens_ratio: float) -> float:
    """The zero share after the same number of steps at ``tokens_ratio`` times the inputs per step: a row no
    input has reached stays zero with probability share ** ratio (inputs drawn independently, as the synthetic
    workloads draw their tokens)."""
    if share <= 0.0 or tokens_ratio <= 0.0:
        return 0.0
    return rounded(share ** tokens_ratio)
