"""The absolute-error leaf values computed for all leaves at once (fitters.gbdt_leaves) give bit-for-bit the trees of
scikit-learn's own per-leaf median loop: every node of every tree, and the predictions."""
import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.ensemble._hist_gradient_boosting import gradient_boosting as hgb
from threadpoolctl import threadpool_limits

from fitters.gbdt_leaves import median_leaves, update_leaves_values


def _data(n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Features and a ln-time target with repeated values (ties, leaves of even and odd sizes)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 12, size=(n, 3)).astype(float)
    y = np.log(5 + x[:, 0] * x[:, 1] + 3 * x[:, 2]) + np.round(rng.normal(0, 0.05, n), 2)
    return x, y


def _fit(x: np.ndarray, y: np.ndarray, weights: np.ndarray | None = None, **kw) -> HistGradientBoostingRegressor:
    params = dict(loss="absolute_error", max_iter=40, max_leaf_nodes=15, min_samples_leaf=3, random_state=0,
                  early_stopping=True, n_iter_no_change=30, validation_fraction=0.2)
    with threadpool_limits(1):   # as fitters.gbdt fits (OpenMP threads only spin on a busy 2-core host)
        return HistGradientBoostingRegressor(**(params | kw)).fit(x, y, sample_weight=weights)


def _nodes(model: HistGradientBoostingRegressor) -> list[bytes]:
    return [predictor.nodes.tobytes() for trees in model._predictors for predictor in trees]


@pytest.mark.parametrize("kw", [{}, {"max_leaf_nodes": 31, "learning_rate": 0.2}, {"loss": "squared_error"}])
def test_the_trees_are_bit_for_bit_scikit_learns(kw):
    x, y = _data()
    theirs = _fit(x, y, **kw)
    with median_leaves():
        assert hgb._update_leaves_values is update_leaves_values
        ours = _fit(x, y, **kw)
    assert hgb._update_leaves_values is not update_leaves_values   # restored
    assert ours.n_iter_ == theirs.n_iter_ and ours._baseline_prediction == theirs._baseline_prediction
    assert _nodes(ours) == _nodes(theirs)
    with threadpool_limits(1):
        assert np.array_equal(ours.predict(x), theirs.predict(x))


def test_weighted_fits_run_scikit_learns_own_code():
    x, y = _data(seed=1)
    weights = np.random.default_rng(2).uniform(0.5, 2.0, len(y))
    theirs = _fit(x, y, weights)
    with median_leaves():
        ours = _fit(x, y, weights)
    assert _nodes(ours) == _nodes(theirs)


def test_leaf_values_are_the_medians_of_each_leafs_residuals():
    """The values themselves, leaf by leaf, against np.median (what scikit-learn calls per leaf)."""
    from sklearn._loss.loss import AbsoluteError
    from sklearn.ensemble._hist_gradient_boosting.grower import TreeGrower
    from sklearn.ensemble._hist_gradient_boosting.binning import _BinMapper

    x, y = _data(n=201, seed=3)
    binned = _BinMapper(random_state=0).fit_transform(x)
    raw = np.full(len(y), np.median(y))
    gradient = np.sign(raw - y).astype(np.float32)
    grower = TreeGrower(binned, gradient, np.ones_like(gradient), max_leaf_nodes=15, min_samples_leaf=3,
                        shrinkage=0.1)
    grower.grow()
    update_leaves_values(AbsoluteError(), grower, y, raw, None)
    sizes = {leaf.sample_indices.size % 2 for leaf in grower.finalized_leaves}
    assert sizes == {0, 1}   # both an even and an odd leaf: the two ways a median is read
    for leaf in grower.finalized_leaves:
        idx = leaf.sample_indices
        assert leaf.value == 0.1 * np.median(y[idx] - raw[idx])
