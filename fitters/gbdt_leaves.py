"""The leaf values of an absolute-error tree (a median of residuals per leaf) computed for all leaves at once.

scikit-learn's ``HistGradientBoostingRegressor(loss="absolute_error")`` sets every leaf of every tree to the median
of the residuals ln(µs) of its samples, one ``np.median`` call per leaf (its ``_update_leaves_values``): on pmdb's
small sets that per-call cost was a third of a gbdt fit's CPU time (~20 µs a leaf, ~30 leaves a tree, thousands of
trees).
:func:`median_leaves` swaps in :func:`update_leaves_values`, which sorts the residuals of one tree once, by leaf then
value, and reads each leaf's middle: the same float operations on the same values (the middle element, or the sum of
the two middle ones halved, as ``np.median`` computes it), so the trees are bit-for-bit those of scikit-learn's loop
(tests/fitters/test_gbdt_leaves.py compares them). Any other case (weights, another loss, a non-finite residual, or
a scikit-learn without that function) runs scikit-learn's own code.
"""
from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from typing import Any

import numpy as np
from sklearn._loss.loss import AbsoluteError

try:   # scikit-learn's private module (pyproject pins 1.9): another layout runs its own code, unchanged
    from sklearn.ensemble._hist_gradient_boosting import gradient_boosting as _hgb
except ImportError:  # pragma: no cover
    _hgb = None
_ORIGINAL = getattr(_hgb, "_update_leaves_values", None)
_PARAMETERS = ["loss", "grower", "y_true", "raw_prediction", "sample_weight"]
if _ORIGINAL is not None and list(inspect.signature(_ORIGINAL).parameters) != _PARAMETERS:
    _ORIGINAL = None   # pragma: no cover  (called otherwise than this module knows)


def update_leaves_values(loss: Any, grower: Any, y_true: np.ndarray, raw_prediction: np.ndarray,
                         sample_weight: np.ndarray | None) -> None:
    """Set ``leaf.value`` of every finalized leaf of ``grower`` to shrinkage × median(y_true - raw_prediction) over
    the leaf's samples, as scikit-learn's ``_update_leaves_values`` does for unweighted absolute error."""
    leaves = grower.finalized_leaves
    if type(loss) is not AbsoluteError or sample_weight is not None or not leaves:
        _ORIGINAL(loss, grower, y_true, raw_prediction, sample_weight)
        return
    indices = np.concatenate([leaf.sample_indices for leaf in leaves])
    residual = y_true[indices] - raw_prediction[indices]
    counts = np.array([leaf.sample_indices.shape[0] for leaf in leaves])
    if residual.dtype != np.float64 or not np.isfinite(residual).all() or not counts.all():
        _ORIGINAL(loss, grower, y_true, raw_prediction, sample_weight)
        return
    leaf_of = np.repeat(np.arange(len(leaves)), counts)
    ordered = residual[np.lexsort((residual, leaf_of))]   # by leaf, then by value within a leaf
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    low, high = starts + (counts - 1) // 2, starts + counts // 2   # the same element when a count is odd
    medians = np.where(low == high, ordered[low], (ordered[low] + ordered[high]) / 2)
    values = grower.shrinkage * medians
    for leaf, value in zip(leaves, values):
        leaf.value = value


@contextlib.contextmanager
def median_leaves() -> Iterator[None]:
    """Within the block, absolute-error fits set their leaves by :func:`update_leaves_values` (restored after)."""
    if _ORIGINAL is None:   # a scikit-learn without that function, or with another: its own code, unchanged
        yield
        return
    _hgb._update_leaves_values = update_leaves_values
    try:
        yield
    finally:
        _hgb._update_leaves_values = _ORIGINAL
