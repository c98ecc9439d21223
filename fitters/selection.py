"""Which family becomes a model name's champion, chosen without the test split.

Every family of a kernel or embedding group is scored on the same **validation part of the training side**: the
configurations :func:`inner_split` sets apart (15 %, seeded by the fit's seed + 1). The learned families already
search their hyperparameters there (gbdt, mlp, DeepSets): their score is that of the chosen candidate, fitted on the
rest of the training side, before its refit on all of it. The analytic families (roofline, additive work terms) are
fitted once more on the rest and scored on the same rows. The champion is the lowest **validation GMAE**
(:func:`fitters.registry.choose_champion`), so the test split stays unseen by every choice and the champion's test
GMAE is a held-out figure, not the best of three held-out figures (which is optimistic by the luck of the pick).

With fewer than :data:`MIN_VALIDATION_ROWS` validation rows no score chooses: the **analytic family** (roofline,
additive work terms) is champion, a choice made before any data is seen. On so few rows the scores cannot tell the
families apart, and a learned family's is tuned on those very rows (its candidate and epochs were picked there):
in a CPU quickstart (2026-12-01, AMD EPYC; 102 names of 2-3 families, median 19 training rows, 2 validation rows)
the lowest validation GMAE picked a network for 65 names and their champions' median test GMAE was 21.7 %, where
the roofline's alone was 9.5 % (and the old pick by test GMAE, optimistic, 9.3 %).
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
MIN_VALIDATION_ROWS = 30      # fewer: the analytic family is champion, no score chooses
ANALYTIC_FAMILIES = ("roofline", "embedding_linear")


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


def validation_score(model: Model, training: TrainingSet, seed: int,
                     refit: Callable[[TrainingSet], Model]) -> tuple[float | None, int]:
    """(GMAE, rows) of the family on the validation rows of ``training``: the learned search's own figure where it
    recorded one (``validation_gmae``, ``validation_rows`` in its search record), else ``refit`` on the other rows
    scored there. GMAE None without a validation row or a finite score."""
    record = model.search_record()
    if record:                         # a learned search: its chosen candidate on its validation rows
        recorded, rows = record.get("validation_gmae"), int(record.get("validation_rows", 0))
        ok = recorded is not None and rows > 0 and math.isfinite(float(recorded))
        return (float(recorded) if ok else None), rows
    inner = inner_split(training.groups, seed)
    if inner.train.size == 0 or inner.test.size == 0:
        return None, int(inner.test.size)
    held = training.params.iloc[inner.test].reset_index(drop=True)
    score = metrics.gmae(refit(subset(training, inner.train)).predict(held), np.asarray(training.times_us)[inner.test])
    return (score if math.isfinite(score) else None), int(inner.test.size)
