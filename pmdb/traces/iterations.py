"""Iteration boundaries of a trace, from the markers of ``common.json`` (first one present wins):

* ``span`` markers (``ProfilerStep#N``): each marker event is one iteration; an op belongs to the last marker that
  started at or before it, and only while that marker lasts (Kineto: the op starts before the marker's end, or at
  its end taking no time; ET: its node id is at most the last id of the marker's subtree). Ops outside every marker
  (before the first, between two markers, after the last) belong to no iteration (NaN). A step is what its marker
  spans, and its measured time is the marker's duration: torch.profiler's ``step()`` opens the next marker as the
  previous one closes, so a training loop's data loading and ``zero_grad`` already run inside the step they serve;
  what runs in a gap between two markers ran outside every step (pmdb's own passes put the ranks' barrier there,
  outside the timed step as in the ground truth), and counting it into either neighbour would make that step's
  graph hold work its measured time does not.
* ``period_end`` markers (``Optimizer.step#...``): iteration k ends where the k-th marker ends. Ops up to the first
  marker's end are iteration 0, between the ends of markers k-1 and k iteration k, after the last one iteration n.
  Only the periods between two marker ends are complete iterations (trace_iterations rows: 1..n-1).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from pmdb.traces.vocabulary import common


def _marker_mode(names: pd.Series) -> tuple[str | None, pd.Series]:
    for regex, mode in common().markers:
        mask = names.str.match(regex)
        if mask.any():
            return mode, mask
    return None, pd.Series(False, index=names.index)


def kineto_iterations(ops: pd.DataFrame) -> tuple[pd.Series, pd.DataFrame]:
    """Iteration of each op (float with NaN outside) and the complete-iteration rows of a Kineto trace.

    ``ops`` needs name, cls, start_us, dur_us (µs). Runtime calls are never markers.
    """
    empty = pd.DataFrame(columns=["iteration", "start_us", "dur_us", "marker"])
    candidates = ops[ops["cls"].isin(["op", "annotation"])]
    mode, mask = _marker_mode(candidates["name"])
    if mode is None:
        return pd.Series(np.nan, index=ops.index), empty
    markers = candidates[mask].sort_values("start_us")
    starts = markers["start_us"].to_numpy()
    ends = (markers["start_us"] + markers["dur_us"]).to_numpy()
    op_start = ops["start_us"].to_numpy()
    if mode == "span":
        idx = np.searchsorted(starts, op_start, side="right") - 1
        iteration = idx.astype(float)
        end = ends[np.maximum(idx, 0)]
        after = (op_start > end) | ((op_start == end) & (ops["dur_us"].to_numpy() > 0))   # starts as it ends
        iteration[(idx < 0) | after] = np.nan
        rows = pd.DataFrame({"iteration": np.arange(len(starts)), "start_us": starts,
                             "dur_us": markers["dur_us"].to_numpy(), "marker": markers["name"].to_numpy()})
        return pd.Series(iteration, index=ops.index), rows
    order = np.argsort(ends, kind="stable")
    ends, names = ends[order], markers["name"].to_numpy()[order]
    iteration = np.searchsorted(ends, op_start, side="right").astype(float)
    rows = pd.DataFrame({"iteration": np.arange(1, len(ends)), "start_us": ends[:-1],
                         "dur_us": np.diff(ends), "marker": names[1:]})
    return pd.Series(iteration, index=ops.index), rows


def et_iterations(nodes: pd.DataFrame) -> tuple[pd.Series, int]:
    """Iteration of each ET node (by node id) and the number of complete iterations. ``nodes`` needs op_id, name,
    parent_id and subtree_end (the largest node id under each node, itself included)."""
    mode, mask = _marker_mode(nodes["name"])
    if mode is None:
        return pd.Series(np.nan, index=nodes.index), 0
    markers = nodes[mask].sort_values("op_id")
    ids = nodes["op_id"].to_numpy()
    if mode == "span":
        first = markers["op_id"].to_numpy()
        idx = np.searchsorted(first, ids, side="right") - 1
        iteration = idx.astype(float)
        last = markers["subtree_end"].to_numpy()
        iteration[(idx < 0) | (ids > last[np.maximum(idx, 0)])] = np.nan
        return pd.Series(iteration, index=nodes.index), len(first)
    bounds = np.sort(markers["subtree_end"].to_numpy())
    iteration = np.searchsorted(bounds, ids, side="left").astype(float)
    return pd.Series(iteration, index=nodes.index), max(len(bounds) - 1, 0)


def aligned_iteration_us(starts: list[float], durations: list[float]) -> float:
    """One iteration's time over all ranks (µs), from the moment the last rank entered it to the moment the last rank
    left it. A rank that entered early spent the difference waiting for its peers at the first collective, outside
    the step: the harness released the ranks at different times (the simulator starts them together). Spans that do
    not all overlap come from clocks that are not comparable (other hosts): then the slowest rank's duration."""
    ends = [s + d for s, d in zip(starts, durations)]
    if not starts or max(starts) >= min(ends):
        return float(max(durations, default=float("nan")))
    return float(max(ends) - max(starts))
