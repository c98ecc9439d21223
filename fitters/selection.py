"""Which family becomes a model name's champion, chosen without the test split.

Every family of a kernel or embedding group is scored on the same **validation part of the training side**: the
configurations :func:`inner_split` sets apart (15 %, seeded by the fit's seed + 1). The champion is the lowest
**validation GMAE** (:func:`fitters.registry.choose_champion`), so the test split stays unseen by every choice and
the champion's test GMAE is a held-out figure, not the best of three held-out figures (optimistic by the luck of
the pick). What counts is the number of validation **configurations** (distinct shapes), not rows: a shape mined
from a trace has hundreds of calls, and 108 rows of one or two shapes tell no more than those shapes do.

How each family is scored there:

- with :data:`NESTED_BELOW` validation configurations or more, a learned family (gbdt, mlp, DeepSets) by its own
  search: the chosen candidate, fitted on the rest of the training side, before its refit on all of it;
- with fewer, every family by a **nested fit**: the family's whole procedure (search included) run again on the
  rest of the training side, then scored on the validation rows, which it never saw. A search's own figure is
  tuned on those rows (its candidate and epochs were picked there), which on a few configurations flatters it
  badly: in a CPU quickstart (2026-12-01, AMD EPYC; 102 names, median 2 validation configurations) the searches'
  figures picked networks whose champions reached 12.2 % test GMAE (geomean), the nested fits 8.8 %, the roofline
  alone 6.8 %;
- the analytic families (roofline, additive work terms) always by a fit on the rest (a few parameters: cheap).

With fewer than :data:`MIN_VALIDATION_CONFIGS` validation configurations (one or two) no score can tell families
apart: the **analytic family** is champion, a choice made before any data is seen. Both cut-offs were set on two
data sets, reported in benchmarks/results/champion_rules.md: the quickstart's CPU sweeps and the V100 table
subsampled to 60 configurations per op (7 validation configurations), where the nested fits' champions reached
2.4 % against the roofline's 11.0 %.
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
NESTED_BELOW = 30             # fewer validation configurations: every family scored by a nested fit
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
    :data:`MIN_VALIDATION_CONFIGS` validation configurations the analytic family where one is there; where a
    candidate has no validation configurations (registered before migration 0021), the lowest test GMAE, as then.
    Ties go to the newest version. None without candidates."""
    if candidates.empty:
        return None
    if candidates["validation_configs"].isna().any():
        first = candidates["test_gmae"].astype(float)
    elif candidates["validation_configs"].min() < MIN_VALIDATION_CONFIGS:
        first = (~candidates["family"].isin(ANALYTIC_FAMILIES)).astype(float)
    else:
        first = candidates["validation_gmae"].astype(float)
    keys = pd.DataFrame({"first": first, "validation": candidates["validation_gmae"].astype(float),
                         "version": candidates.get("version", pd.Series(0, index=candidates.index))})
    return keys.sort_values(["first", "validation", "version"], ascending=[True, True, False],
                            na_position="last", kind="stable").index[0]


def validation_score(model: Model, training: TrainingSet, seed: int,
                     refit: Callable[[TrainingSet], Model]) -> tuple[float | None, int]:
    """(GMAE, configurations) of the family on the validation rows of ``training``: a learned search's own figure
    (``validation_gmae`` in its search record) with :data:`NESTED_BELOW` configurations there or more, else
    ``refit`` (the family's whole fit) on the other rows scored there. GMAE None without a validation row, a fit or
    a finite score."""
    record = model.search_record()
    inner = inner_split(training.groups, seed)
    configs = int(np.unique(np.asarray(training.groups)[inner.test].astype(str)).size)
    if record and configs >= NESTED_BELOW:
        recorded = record.get("validation_gmae")
        ok = recorded is not None and math.isfinite(float(recorded))
        return (float(recorded) if ok else None), configs
    if inner.train.size == 0 or inner.test.size == 0:
        return None, configs
    held = training.params.iloc[inner.test].reset_index(drop=True)
    try:
        nested = refit(subset(training, inner.train))
    except (PmdbError, ValueError):   # a part too small for the family's fit: no score, so it is not chosen
        return None, configs
    score = metrics.gmae(nested.predict(held), np.asarray(training.times_us)[inner.test])
    return (score if math.isfinite(score) else None), configs
