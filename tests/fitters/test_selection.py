"""The validation scores that choose champions (fitters/selection.py), on real fits of a synthetic GEMM sweep: a
search's own figure only where the validation part is large, a nested fit that never saw those rows where it is
small."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fitters import gbdt, roofline
from fitters.model import TrainingSet
from fitters.selection import NESTED_BELOW, inner_split, subset, validation_score
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


def test_a_small_validation_part_scores_every_family_by_a_nested_fit():
    training = _training(60)
    model = gbdt.fit(training, 0, max_trials=2)
    score, configs = validation_score(model, training, 0, lambda part: gbdt.fit(part, 0, max_trials=2))
    assert configs < NESTED_BELOW
    assert score == pytest.approx(_nested(lambda t, s: gbdt.fit(t, s, max_trials=2), training, 0))
    assert score != pytest.approx(model.search_record()["validation_gmae"])   # not the search's own figure
    analytic, _ = validation_score(roofline.fit(training), training, 0, roofline.fit)
    assert analytic == pytest.approx(_nested(lambda t, s: roofline.fit(t), training, 0))


def test_a_large_validation_part_takes_the_search_s_own_figure():
    training = _training(400)
    model = gbdt.fit(training, 0, max_trials=2)
    score, configs = validation_score(model, training, 0, lambda part: pytest.fail("no nested fit above the cut-off"))
    assert configs >= NESTED_BELOW
    assert score == pytest.approx(model.search_record()["validation_gmae"])


def test_many_rows_of_few_configurations_count_as_few():
    """A mined trace's shapes come with hundreds of calls each: what decides is the validation configurations (20
    shapes x 20 calls: 3 shapes, 60 rows there), so every family gets a nested fit, not a search's own figure."""
    training = _training(20, repeats=20)
    model = gbdt.fit(training, 0, max_trials=2)
    score, configs = validation_score(model, training, 0, lambda part: gbdt.fit(part, 0, max_trials=2))
    assert configs == 3 and inner_split(training.groups, 0).test.size == 60
    assert score == pytest.approx(_nested(lambda t, s: gbdt.fit(t, s, max_trials=2), training, 0))
