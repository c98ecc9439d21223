"""Which family becomes a model name's champion, chosen without the test split.

Every family of a kernel or embedding group is scored on its **training side** only, the same rows for every family,
and the champion is the lowest score (**validation GMAE**, :func:`champion_of`, called by
:func:`fitters.registry.choose_champion`), so the test split stays unseen by every choice and the champion's test
GMAE is a held-out figure, not the best of three held-out figures (optimistic by the luck of the pick). What counts
is **configurations** (distinct shapes), not rows: a shape mined from a trace has hundreds of calls, and 108 rows of
one or two shapes tell no more than those shapes do. The validation part is the configurations :func:`inner_split`
sets apart (15 %, seeded by the fit's seed + 1). How each family is scored:

- with :data:`NESTED_BELOW` validation configurations or more there, a learned family (gbdt, mlp, DeepSets) by its
  own search's figure (the chosen candidate, fitted on the rest, scored on the validation part, before its refit on
  all of it), an analytic one (roofline, additive work terms) by a fit on the rest scored there;
- with fewer, every family by **cross-validation** (:func:`cross_validated`): the family's whole procedure (search
  included) is fitted :data:`CV_FOLDS` times, each time on all but one fold of the training side's configurations
  and scored on that fold, so every training row is scored once by a fit that never saw it. On small groups a
  search's own figure is tuned on the rows that score it (its candidate and epochs were picked there) and one
  validation part of a few configurations is a noisy judge. Measured on data the rule was not set on
  (benchmarks/results/champion_rules.md, 2026-12-01): the tables of four GPUs subsampled to 20 configurations per
  op (2 validation configurations), cross-validation's champions 6.5-9.8 % test GMAE where one nested part gave
  7.6-12.9 % and the analytic family 6.3-15.9 %; a CPU quickstart's sweeps 8.5 % (nested 10.2 %, searches' figures
  14.1 %, analytic alone 8.3 %).

With fewer than :data:`MIN_VALIDATION_CONFIGS` configurations scored, or no family with a score, no score can tell
families apart: the **analytic family** is champion, a choice made before any data is seen.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable

import numpy as np
import pandas as pd

from fitters.model import Model, TrainingSet
from fitters.split import Split, split_rows
from pmdb import metrics
from pmdb.errors import PmdbError

VALIDATION_FRACTION = 0.15    # share of the training side's configurations held out for choices
MIN_VALIDATION_CONFIGS = 3    # fewer validation configurations: the analytic family is champion
NESTED_BELOW = 30             # fewer validation configurations: every family scored by cross-validation
CV_FOLDS = 5                  # folds of that cross-validation, by configuration
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


def champion_of(candidates: pd.DataFrame) -> object:
    """The index label of the champion among one name's candidates (columns family, test_gmae, validation_gmae,
    validation_configs and, for ties, version): the lowest validation GMAE; with fewer than
    :data:`MIN_VALIDATION_CONFIGS` configurations scored, or no candidate scored, the analytic family where one is
    there; where a candidate has no validation configurations (registered before migration 0021), the lowest test
    GMAE, as then. Ties go to the newest version. None without candidates."""
    if candidates.empty:
        return None
    if candidates["validation_configs"].isna().any():
        first = candidates["test_gmae"].astype(float)
    elif (candidates["validation_configs"].min() < MIN_VALIDATION_CONFIGS
          or candidates["validation_gmae"].isna().all()):
        first = (~candidates["family"].isin(ANALYTIC_FAMILIES)).astype(float)
    else:
        first = candidates["validation_gmae"].astype(float)
    keys = pd.DataFrame({"first": first, "validation": candidates["validation_gmae"].astype(float),
                         "version": candidates.get("version", pd.Series(0, index=candidates.index))})
    return keys.sort_values(["first", "validation", "version"], ascending=[True, True, False],
                            na_position="last", kind="stable").index[0]


def fold_keys(groups: np.ndarray, seed: int, folds: int) -> np.ndarray:
    """Fold number (0 .. ``folds`` - 1) of each row, by configuration: a seeded permutation of the distinct
    configurations dealt round-robin, so folds differ by at most one configuration (fewer folds than configurations
    are never made: with n configurations, min(folds, n) folds)."""
    keys = pd.Series(np.asarray(groups)).astype(str)
    distinct = np.array(sorted(keys.unique()))
    order = np.random.default_rng(seed).permutation(distinct.size)
    fold_of = {distinct[i]: rank % max(1, min(folds, distinct.size)) for rank, i in enumerate(order)}
    return keys.map(fold_of).to_numpy(dtype=int)


def cross_validated(training: TrainingSet, seed: int, refit: Callable[[TrainingSet], Model],
                    folds: int) -> float | None:
    """GMAE (fraction) of the family over every row of ``training``, each row predicted by the family's whole fit on
    the other folds' configurations (:func:`fold_keys`, seeded by ``seed`` + 1). None where a fold's fit fails or
    fewer than two configurations are there."""
    fold = fold_keys(training.groups, seed + 1, folds)
    if np.unique(fold).size < 2:
        return None
    predicted = np.full(len(fold), np.nan)
    for k in np.unique(fold):
        held = np.flatnonzero(fold == k)
        try:   # a part too small for the family's fit, or a held-out shape its features refuse: no score
            model = refit(subset(training, np.flatnonzero(fold != k)))
            predicted[held] = model.predict(training.params.iloc[held].reset_index(drop=True))
        except (PmdbError, ValueError):
            return None
    score = metrics.gmae(predicted, np.asarray(training.times_us))
    return score if math.isfinite(score) else None


def validation_score(model: Model, training: TrainingSet, seed: int,
                     refit: Callable[[TrainingSet], Model]) -> tuple[float | None, int]:
    """(GMAE, configurations scored) of the family on ``training``: with :data:`NESTED_BELOW` validation
    configurations or more, a learned search's own figure (``validation_gmae`` in its search record) or, for a family
    without a search, ``refit`` (the family's whole fit) on the other rows scored on the validation rows; with fewer,
    :func:`cross_validated` over every configuration of the training side in :data:`CV_FOLDS` folds. GMAE None
    without a validation row, a fit or a finite score."""
    record = model.search_record()
    inner = inner_split(training.groups, seed)
    configs = int(np.unique(np.asarray(training.groups)[inner.test].astype(str)).size)
    if configs < NESTED_BELOW:
        return (cross_validated(training, seed, refit, CV_FOLDS),
                int(np.unique(np.asarray(training.groups).astype(str)).size))
    if record:
        recorded = record.get("validation_gmae")
        ok = recorded is not None and math.isfinite(float(recorded))
        return (float(recorded) if ok else None), configs
    held = training.params.iloc[inner.test].reset_index(drop=True)
    try:   # a part too small for the family's fit, or a held-out shape its features refuse: no score, not chosen
        predicted = refit(subset(training, inner.train)).predict(held)
    except (PmdbError, ValueError):
        return None, configs
    score = metrics.gmae(predicted, np.asarray(training.times_us)[inner.test])
    return (score if math.isfinite(score) else None), configs
