"""The validation scores that choose champions (fitters/selection.py), on real fits of a synthetic GEMM sweep: a
search's own figure only where the validation part is large, cross-validation by fits that never saw the rows they
score where it is small."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fitters import gbdt, roofline
from fitters.model import TrainingSet
from fitters.selection import (CV_FOLDS, NESTED_BELOW, champion_of, cross_validated, fold_keys, inner_split, subset,
                                validation_score)
from pmdb import metrics


def _training(n: int, seed: int = 0, repeats: int = 1) -> TrainingSet:
    """``n`` GEMM configurations, each timed ``repeats`` times (rows of one shape, as a trace's mined calls)."""
    rng = np.random.default_rng(seed)
    params = pd.DataFrame({"B": 1, "M": rng.integers(8, 512, n), "N": rng.integers(8, 512, n),
                           "K": rng.integers(8, 512, n)})
    params = params.loc[params.index.repeat(repeats)].reset_index(drop=True)
    n = len(params)
    flops = 2.0 * params["M"] * params["N"] * params["K"]
    times = (3.0 + flops / 5e4) * rng.lognormal(0.0, 0.03, n)
    keys = params.astype(str).agg("x".join, axis=1).to_numpy()
    return TrainingSet("fully_connected", "fwd", "float32", params, times.to_numpy(), keys,
                       {"gemm_flops": 5e10, "mem_bw": 1e10})


def _nested(family_fit, training: TrainingSet, seed: int) -> float:
    inner = inner_split(training.groups, seed)
    model = family_fit(subset(training, inner.train), seed)
    return metrics.gmae(model.predict(training.params.iloc[inner.test].reset_index(drop=True)),
                        training.times_us[inner.test])


class _Lookup:
    """A 'model' that prices the configurations it was fitted on at their time and every other one at twice its time
    (it peeks at ``truth`` to do so): a row scored by a fit that never saw it is exactly 100 % off, any other 0 %."""

    def __init__(self, part: TrainingSet, truth: dict[str, float]):
        self.known, self.truth = set(np.asarray(part.groups).astype(str)), truth

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        keys = frame.astype(str).agg("x".join, axis=1)
        return np.array([self.truth[key] * (1.0 if key in self.known else 2.0) for key in keys])


def test_cross_validation_scores_every_row_by_a_fit_that_never_saw_its_configuration():
    training = _training(24)
    truth = dict(zip(np.asarray(training.groups).astype(str), training.times_us))
    seen: list[set[str]] = []

    def refit(part: TrainingSet) -> _Lookup:
        seen.append(set(np.asarray(part.groups).astype(str)))
        return _Lookup(part, truth)

    score = cross_validated(training, 0, refit, CV_FOLDS)
    assert score == pytest.approx(1.0, abs=1e-3)      # every row 100 % off: none was scored by a fit that saw it
    every = set(truth)
    left_out = [every - part for part in seen]
    assert len(seen) == CV_FOLDS and sorted(map(len, left_out)) == [4, 5, 5, 5, 5]   # 24 shapes in 5 folds
    assert set().union(*left_out) == every and sum(map(len, left_out)) == len(every)  # each left out once


def test_folds_are_seeded_balanced_and_keep_a_configuration_together():
    groups = np.repeat([f"c{i}" for i in range(13)], 4)
    folds = fold_keys(groups, 7, 5)
    assert np.array_equal(folds, fold_keys(groups, 7, 5)) and not np.array_equal(folds, fold_keys(groups, 8, 5))
    per_config = pd.Series(folds).groupby(groups).nunique()
    assert (per_config == 1).all()                           # a configuration's rows share their fold
    sizes = pd.Series(folds).groupby(groups).first().value_counts()
    assert sorted(sizes) == [2, 2, 3, 3, 3]                    # 13 configurations: folds differ by one at most
    assert set(fold_keys(groups[:8], 0, 5)) == {0, 1}          # two configurations: two folds, never an empty one


def test_a_small_validation_part_scores_every_family_by_cross_validation():
    training = _training(60)
    model = gbdt.fit(training, 0, max_trials=2)
    calls = []

    def refit(part):
        calls.append(len(part.params))
        return gbdt.fit(part, 0, max_trials=2)

    score, configs = validation_score(model, training, 0, refit)
    assert configs == 60 and len(calls) == CV_FOLDS                # every training configuration scored
    assert score == pytest.approx(cross_validated(training, 0, lambda part: gbdt.fit(part, 0, max_trials=2),
                                                  CV_FOLDS))
    assert score != pytest.approx(model.search_record()["validation_gmae"])   # not the search's own figure
    analytic, analytic_configs = validation_score(roofline.fit(training), training, 0, roofline.fit)
    assert analytic_configs == 60
    assert analytic == pytest.approx(cross_validated(training, 0, roofline.fit, CV_FOLDS))


def test_no_family_scored_makes_the_analytic_family_champion():
    candidates = pd.DataFrame({"family": ["gbdt", "roofline", "mlp"], "test_gmae": [0.01, 0.5, 0.02],
                               "validation_gmae": [np.nan] * 3, "validation_configs": [40] * 3, "version": [3, 2, 1]})
    assert candidates.loc[champion_of(candidates), "family"] == "roofline"
    candidates.loc[2, "validation_gmae"] = 0.3
    assert candidates.loc[champion_of(candidates), "family"] == "mlp"


def test_a_large_validation_part_takes_the_search_s_own_figure():
    training = _training(400)
    model = gbdt.fit(training, 0, max_trials=2)
    score, configs = validation_score(model, training, 0, lambda part: pytest.fail("no nested fit above the cut-off"))
    assert configs >= NESTED_BELOW
    assert score == pytest.approx(model.search_record()["validation_gmae"])
    # a family without a search (the roofline) is fitted on the rest and scored on the validation part
    analytic, analytic_configs = validation_score(roofline.fit(training), training, 0, roofline.fit)
    assert analytic_configs == configs
    assert analytic == pytest.approx(_nested(lambda t, s: roofline.fit(t), training, 0))


def test_many_rows_of_few_configurations_count_as_few():
    """A mined trace's shapes come with hundreds of calls each: what decides is the validation configurations (20
    shapes x 20 calls: 3 shapes, 60 rows there), so every family is cross-validated over its 20 shapes, not scored by
    a search's own figure."""
    training = _training(20, repeats=20)
    model = gbdt.fit(training, 0, max_trials=2)
    score, configs = validation_score(model, training, 0, lambda part: gbdt.fit(part, 0, max_trials=2))
    assert configs == 20 and inner_split(training.groups, 0).test.size == 60
    assert score == pytest.approx(cross_validated(training, 0, lambda part: gbdt.fit(part, 0, max_trials=2),
                                                  CV_FOLDS))
    assert score != pytest.approx(model.search_record()["validation_gmae"])


def test_a_held_out_shape_the_features_refuse_leaves_the_family_unscored_not_the_fit_failed():
    """One configuration with K = 0: a gbdt fitted without it takes ln K and refuses it when its fold is scored (a
    quickstart's conv2d with pad 0 did this), so the family gets no score instead of failing the fit; the roofline,
    which takes the zero, is scored."""
    training = _training(20)
    training.params.loc[3, "K"] = 0
    assert cross_validated(training, 0, lambda part: gbdt.fit(part, 0, max_trials=2), CV_FOLDS) is None
    assert cross_validated(training, 0, roofline.fit, CV_FOLDS) > 0
