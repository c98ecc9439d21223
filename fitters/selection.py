"""Which family becomes a model name's champion, chosen without the test split.

Every family of a kernel or embedding group is scored on the same **validation part of the training side**: the
configurations :func:`inner_split` sets apart (15 %, seeded by the fit's seed + 1). The learned families already
search their hyperparameters there (gbdt, mlp, DeepSets): their score is that of the chosen candidate, fitted on the
rest of the training side, before its refit on all of it. The analytic families (roofline, additive work terms) are
fitted once more on the rest and scored on the same rows. The champion is the lowest **validation GMAE**
(:func:`fitters.registry.choose_champion`), so the test split stays unseen by every choice and the champion's test
GMAE is a held-out figure, not the best of three held-out figures (which is optimistic by the luck of the pick).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import numpy as np

from fitters.model import Model, TrainingSet
from fitters.split import Split, split_rows
from pmdb import metrics

VALIDATION_FRACTION = 0.15    # share of the training side's configurations held out for choices


def inner_split(groups: np.ndarray, seed: int) -> Split:
    """(fit rows, validation rows) of a training side, by configuration: the same rows for every family."""
    return split_rows(groups, seed + 1, VALIDATION_FRACTION)


def ln_gmae(predicted_ln: np.ndarray, measured_ln: np.ndarray) -> float:
    """GMAE (fraction) of predictions given as ln(µs) against ln(µs) measurements."""
    return metrics.gmae(np.exp(np.asarray(predicted_ln, dtype=float)), np.exp(np.asarray(measured_ln, dtype=float)))


def subset(training: TrainingSet, rows: np.ndarray) -> TrainingSet:
    """The training set restricted to ``rows``."""
    return replace(training, params=training.params.iloc[rows].reset_index(drop=True),
                   times_us=np.asarray(training.times_us)[rows], groups=np.asarray(training.groups)[rows])


def validation_gmae(model: Model, training: TrainingSet, seed: int,
                    refit: Callable[[TrainingSet], Model]) -> float | None:
    """The family's GMAE on the validation rows of ``training``: the learned search's own figure where it recorded
    one (``validation_gmae`` in its search record), else ``refit`` on the other rows scored there. None without a
    validation row (fewer than two configurations) or a finite score."""
    recorded = model.search_record().get("validation_gmae")
    if recorded is not None:
        return float(recorded) if math.isfinite(float(recorded)) else None
    if model.search_record():          # a learned search that set nothing apart (or was cut before scoring)
        return None
    inner = inner_split(training.groups, seed)
    if inner.train.size == 0 or inner.test.size == 0:
        return None
    held = training.params.iloc[inner.test].reset_index(drop=True)
    score = metrics.gmae(refit(subset(training, inner.train)).predict(held), np.asarray(training.times_us)[inner.test])
    return score if math.isfinite(score) else None
