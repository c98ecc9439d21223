"""Each kernel family on a synthetic timing law with known parameters, scored on held-out rows only, and saved and
reloaded to the same predictions."""
import numpy as np
import pandas as pd
import pytest

from fitters import embedding, gbdt, mlp, roofline
from fitters.model import TrainingSet, load_dir
from fitters.split import split_rows
from fitters.model import TrainConfig
from pmdb import metrics
from pmdb.errors import PmdbError

TINY = TrainConfig(max_trials=1, max_epochs=600, patience=150)


def _gemm_sets(synthetic, n=150, sigma=0.03):
    configs = synthetic.gemm_configs(n)
    params = pd.DataFrame(configs).astype(float)
    exact = np.array([synthetic.gemm_law(c) for c in configs])
    times = synthetic.noisy(exact, sigma, 1) if sigma else exact
    keys = params.astype(int).astype(str).agg("-".join, axis=1).to_numpy()
    split = split_rows(keys, 0)
    peaks = {"gemm_flops": synthetic.FLOPS, "mem_bw": synthetic.BW}
    train = TrainingSet("fully_connected", "fwd", "float32", params.iloc[split.train].reset_index(drop=True),
                        times[split.train], keys[split.train], peaks)
    return train, params.iloc[split.test].reset_index(drop=True), times[split.test]


def _baseline_gmae(train, test_times):
    """GMAE of predicting the training median for every test row (what a model must beat by far)."""
    return metrics.gmae(np.full(len(test_times), np.median(train.times_us)), test_times)


def test_roofline_recovers_the_known_law(synthetic):
    train, test_params, test_times = _gemm_sets(synthetic, sigma=0.0)
    model = roofline.fit(train)
    assert model.t0_us == pytest.approx(synthetic.T0, rel=0.01)
    assert model.eff_flops == pytest.approx(1.0, rel=0.01) and model.eff_bw == pytest.approx(1.0, rel=0.01)
    assert metrics.gmae(model.predict(test_params), test_times) < 0.01


def test_uncalibrated_roofline_needs_measured_peaks(synthetic):
    pure = roofline.uncalibrated("relu", "fwd", "float32", {"gemm_flops": 1e10, "mem_bw": 1e9})
    # relu: 2 accesses of 4 bytes per element over 1e9 bytes/s -> 8e-3 µs per element
    assert pure.predict(pd.DataFrame({"M": [1000.0], "N": [1000.0]}))[0] == pytest.approx(8000.0)
    with pytest.raises(PmdbError, match="peaks"):
        roofline.uncalibrated("relu", "fwd", "float32", {"gemm_flops": 1e10})


@pytest.mark.parametrize("family", ["roofline", "mlp", "gbdt"])
def test_family_learns_law_on_held_out_rows_and_reloads(synthetic, family, tmp_path):
    train, test_params, test_times = _gemm_sets(synthetic)
    fit = {"roofline": lambda: roofline.fit(train), "mlp": lambda: mlp.fit(train, 0, 20, TINY),
           "gbdt": lambda: gbdt.fit(train, 0, 20, max_trials=2)}[family]
    model = fit()
    predicted = model.predict(test_params)
    error = metrics.gmae(predicted, test_times)
    assert error < 0.2 * _baseline_gmae(train, test_times), (family, error)
    again = load_dir(model.save(tmp_path / family))
    assert type(again) is type(model) and again.family == family
    assert np.allclose(again.predict(test_params), predicted, rtol=1e-6)


def test_mlp_search_is_seeded():
    rng = np.random.default_rng(0)
    params = pd.DataFrame({"M": rng.integers(1, 500, 60), "N": rng.integers(1, 500, 60)}).astype(float)
    times = 5 + params["M"].to_numpy() * params["N"].to_numpy() / 1000
    train = TrainingSet("relu", "fwd", "float32", params, times, np.arange(60).astype(str))
    one = TrainConfig(max_trials=1, max_epochs=40, patience=40)
    first, second = mlp.fit(train, 7, 30, one), mlp.fit(train, 7, 30, one)
    assert np.allclose(first.predict(params), second.predict(params))


def test_embedding_deepsets_learns_additive_tables(synthetic, tmp_path):
    configs, stats, exact = synthetic.embedding_data(160)
    times = synthetic.noisy(exact, 0.03, 2)
    frame = pd.DataFrame({c: [[t[c] for t in tables] for tables in stats]
                          for c in ("batch_size", "num_rows", "pooling_mean", "dim", "reuse_factors")})
    keys = np.arange(len(times)).astype(str)
    split = split_rows(keys, 0)
    train = TrainingSet("embedding_lookup", "fwd", "float32", frame.iloc[split.train].reset_index(drop=True),
                        times[split.train], keys[split.train])
    model = embedding.fit(train, 0, 30, TrainConfig(max_trials=1, max_epochs=800, patience=150))
    test = frame.iloc[split.test].reset_index(drop=True)
    error = metrics.gmae(model.predict(test), times[split.test])
    assert error < 0.3 * _baseline_gmae(train, times[split.test]), error
    again = load_dir(model.save(tmp_path / "emb"))
    assert np.allclose(again.predict(test), model.predict(test), rtol=1e-6)
    # a table order does not matter (a set model)
    flipped = test.map(lambda v: v[::-1] if isinstance(v, list) else v)
    assert np.allclose(model.predict(flipped), model.predict(test), rtol=1e-4)
