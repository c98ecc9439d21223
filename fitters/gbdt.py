"""Gradient-boosted trees (scikit-learn HistGradientBoostingRegressor) on the MLP's features, target ln(µs).

A counted number of seeded candidates (``max_trials``, fewer on small sets; loss: absolute error, robust to outlier
timings, or squared error; learning rate, leaves, L2) are scored on a validation part of the training rows with
early stopping (at most ``MAX_ITER`` boosting iterations), by the geometric mean of |error| in ln-time (the analogue
of the reported GMAE); the best is refitted on all training rows with its number of boosting iterations. Trees are
grown on one OpenMP thread, so the model is a function of the data and seed only. The time budget is a safety cap
checked between candidates: a search it cuts short says ``budget_hit`` (its result then depends on the machine's
speed). A forward GEMM model (fully_connected, bmm) keeps its trained range and prices GEMMs beyond it by
waves (:func:`fitters.gemm_shapes.scaled_forward`), where trees stay flat. Saved with skops; loading trusts exactly
the scikit-learn types of this family (nothing else is accepted).
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import skops.io as sio
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from fitters import features as feats, gemm_shapes, work
from fitters.gbdt_leaves import median_leaves
from fitters.model import Model, TrainConfig, TrainingSet
from fitters.selection import inner_split, ln_gmae
from fitters.torch_train import candidates
from pmdb.errors import PmdbError

GRID = {"loss": ("absolute_error", "squared_error"), "learning_rate": (0.05, 0.1, 0.2), "max_leaf_nodes": (15, 31, 63),
        "l2_regularization": (0.0, 1.0)}
FIRST = {"loss": "absolute_error", "learning_rate": 0.1, "max_leaf_nodes": 31, "l2_regularization": 0.0}
MAX_TRIALS = work.GBDT_TRIALS   # candidates per search (TrainConfig.trials_for: 2 below 50 rows); `pmdb fit --trials`
MAX_ITER = 2000
OPENMP_THREADS = 1  # small tabular sets: threads only add contention (and spin badly on a busy machine)
WEIGHTS_FILE = "model.skops"
TRUSTED_TYPES = {"sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
                 "sklearn.ensemble._hist_gradient_boosting.binning._BinMapper",
                 "sklearn._loss.loss.HalfSquaredError", "sklearn._loss.loss.AbsoluteError",
                 "sklearn._loss.link.IdentityLink",
                 "sklearn._loss.link.Interval"}


class GBDTModel(Model):
    """``predict`` takes a frame with the op's parameter columns (see the feature spec)."""

    family = "gbdt"

    def __init__(self, spec: feats.FeatureSpec, estimator: HistGradientBoostingRegressor, info: dict[str, Any],
                 gemm_bounds: dict[str, float] | None = None):
        self.spec, self.estimator, self.info = spec, estimator, info
        self.gemm_bounds = gemm_bounds   # a forward GEMM's trained range: beyond it, waves (gemm_shapes)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return gemm_shapes.scaled_forward(self._predict, self.spec.op, frame, self.gemm_bounds)

    def _predict(self, frame: pd.DataFrame) -> np.ndarray:
        with threadpool_limits(OPENMP_THREADS):
            return np.exp(self.estimator.predict(feats.transform(self.spec, frame)))

    def config(self) -> dict[str, Any]:
        chosen = {k: self.estimator.get_params()[k] for k in FIRST}
        return {"features": self.spec.to_dict(), **chosen, "max_iter": int(self.estimator.max_iter),
                "min_samples_leaf": int(self.estimator.min_samples_leaf), "search": self.info,
                "gemm_bounds": self.gemm_bounds, "budget_hit": self.budget_hit}

    def search_record(self) -> dict[str, Any]:
        return self.info

    def save_weights(self, directory: Path) -> None:
        sio.dump(self.estimator, directory / WEIGHTS_FILE)

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "GBDTModel":
        path = directory / WEIGHTS_FILE
        untrusted = set(sio.get_untrusted_types(file=path))
        if untrusted - TRUSTED_TYPES:
            raise PmdbError(f"{path} holds types a GBDT model never has: {', '.join(sorted(untrusted - TRUSTED_TYPES))}")
        estimator = sio.load(path, trusted=sorted(untrusted))
        return cls(feats.FeatureSpec.from_dict(config["features"]), estimator, config["search"],
                   config.get("gemm_bounds"))


def _estimator(hyper: dict[str, Any], seed: int, max_iter: int, min_leaf: int,
               early: bool) -> HistGradientBoostingRegressor:
    return HistGradientBoostingRegressor(max_iter=max_iter, min_samples_leaf=min_leaf, random_state=seed,
                                         early_stopping=early, n_iter_no_change=30, **hyper)


def fit(training: TrainingSet, seed: int = 0, budget_s: float = float("inf"),
        max_trials: int = MAX_TRIALS) -> GBDTModel:
    """``max_trials`` seeded candidates scored on validation; the best refitted on all training rows. ``budget_s``
    (s) is a safety cap: no candidate starts after it (the record then says ``budget_hit``)."""
    deadline = time.monotonic() + budget_s
    spec = feats.build_spec(training.op, training.pass_, training.dtype, training.params)
    x = feats.transform(spec, training.params)
    y = feats.log_target(training.times_us)
    inner = inner_split(training.groups, seed)
    min_leaf = int(np.clip(len(y) // 50, 2, 20))
    with threadpool_limits(OPENMP_THREADS), median_leaves():   # absolute-error leaves: all at once
        model = _search(spec, x, y, inner, min_leaf, seed, deadline, max_trials)
    model.gemm_bounds = gemm_shapes.forward_bounds(training.op, training.pass_, training.params)
    return model


def _search(spec: feats.FeatureSpec, x: np.ndarray, y: np.ndarray, inner: Any, min_leaf: int, seed: int,
            deadline: float, max_trials: int) -> GBDTModel:
    trials: list[dict[str, Any]] = []
    validation: list[float] = []   # each trial's GMAE on the validation rows (fitters.selection)
    planned = TrainConfig(max_trials=max_trials).trials_for(len(y))
    capped = False
    for hyper in candidates(GRID, FIRST, seed)[:planned]:
        if trials and time.monotonic() > deadline:
            capped = True
            break
        model = _estimator(hyper, seed, MAX_ITER, min_leaf, early=True)
        model.fit(x[inner.train], y[inner.train], X_val=x[inner.test], y_val=y[inner.test])
        predicted = model.predict(x[inner.test])
        residual = np.abs(predicted - y[inner.test])
        val_score = float(np.exp(np.mean(np.log(residual + 1e-4))))  # the GMAE analogue in ln-time
        trials.append({**hyper, "val_score": round(val_score, 6), "iterations": int(model.n_iter_)})
        validation.append(ln_gmae(predicted, y[inner.test]))
    chosen = min(range(len(trials)), key=lambda i: trials[i]["val_score"])
    best = trials[chosen]
    hyper = {k: best[k] for k in FIRST}
    final = _estimator(hyper, seed, max(best["iterations"], 1), min_leaf, early=False).fit(x, y)
    return GBDTModel(spec, final, {"trials": trials, "validation_rows": int(inner.test.size), "budget_hit": capped,
                                   "validation_gmae": round(validation[chosen], 6),
                                   "work": {"max_trials": planned, "max_iter": MAX_ITER}})
