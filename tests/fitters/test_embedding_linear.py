"""The analytic embedding family: exact recovery of a law in its own terms, held-out accuracy on the synthetic
embedding law the DeepSets test uses, additivity over tables, and a save/load round trip."""
import numpy as np
import pandas as pd
import pytest

from fitters import embedding_linear
from fitters.model import TrainingSet, load_dir
from fitters.split import split_rows
from pmdb import metrics

COLUMNS = ("batch_size", "num_rows", "pooling_mean", "dim", "reuse_factors")


def _frame(stats):
    return pd.DataFrame({c: [[t[c] for t in tables] for tables in stats] for c in COLUMNS})


def _split(synthetic, n, sigma):
    _, stats, exact = synthetic.embedding_data(n)
    frame, times = _frame(stats), synthetic.noisy(exact, sigma, 2)
    keys = np.arange(len(times)).astype(str)
    split = split_rows(keys, 0)
    train = TrainingSet("embedding_lookup", "bwd", "float32", frame.iloc[split.train].reset_index(drop=True),
                        times[split.train], keys[split.train])
    return train, frame.iloc[split.test].reset_index(drop=True), times[split.test]


def test_recovers_a_law_written_in_its_own_terms(synthetic):
    _, stats, _ = synthetic.embedding_data(80, seed=3)
    frame = _frame(stats)
    truth = np.array([7.0, 2.0, 0.01, 0.0005, 0.002, 0.0])  # µs per unit of each term (the last one absent)
    times = embedding_linear.work_terms(frame) @ truth
    model = embedding_linear.fit(TrainingSet("embedding_lookup", "fwd", "float32", frame, times,
                                             np.arange(len(times)).astype(str)))
    assert np.allclose(model.predict(frame), times, rtol=1e-6)
    per_unit = model.config()["us_per_unit"]
    assert per_unit["const"] == pytest.approx(7.0, rel=1e-4)
    assert per_unit["output_elements"] == pytest.approx(0, abs=1e-9)


def test_held_out_error_additivity_and_round_trip(synthetic, tmp_path):
    train, test, test_times = _split(synthetic, 160, 0.03)
    model = embedding_linear.fit(train)
    error = metrics.gmae(model.predict(test), test_times)
    baseline = metrics.gmae(np.full(len(test_times), np.median(train.times_us)), test_times)
    assert error < 0.3 * baseline, (error, baseline)
    # additive over tables: an op of two tables costs the two one-table ops minus one fixed cost
    two = test[test["num_rows"].map(len) == 2].head(1).reset_index(drop=True)
    halves = pd.DataFrame({c: [[two.at[0, c][i]] for i in range(2)] for c in COLUMNS})
    const = model.config()["us_per_unit"]["const"]
    assert model.predict(two)[0] == pytest.approx(model.predict(halves).sum() - const, rel=1e-6)
    again = load_dir(model.save(tmp_path / "lin"))
    assert np.allclose(again.predict(test), model.predict(test), rtol=1e-9)
