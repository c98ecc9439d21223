"""The roofline's zero-share term: recovered from a law where exact zeros cost extra per MiB, 0 when no training
row reads zeros, and a model fitted before Z existed (no Z column) still predicts; ML features fill a missing Z."""
import numpy as np
import pandas as pd
import pytest

from fitters import features as feats
from fitters import opcost, roofline
from fitters.model import TrainingSet, load_dir

PEAKS = {"gemm_flops": 1e11, "mem_bw": 1e10}


def _law(params: pd.DataFrame, zero_us_per_mib: float) -> np.ndarray:
    _, moved = opcost.work("sqrt", "fwd", params)
    return 5.0 + moved / (0.4 * PEAKS["mem_bw"]) * 1e6 + zero_us_per_mib * opcost.zero_mib(params)


def _set(counts, shares, zero_us_per_mib: float) -> TrainingSet:
    params = pd.DataFrame({"M": np.asarray(counts, dtype=float), "N": 256.0, "Z": np.asarray(shares, dtype=float)})
    return TrainingSet("sqrt", "fwd", "float32", params, _law(params, zero_us_per_mib),
                       np.arange(len(counts)).astype(str), PEAKS)


def test_recovers_the_cost_of_zeros_and_keeps_random_values_apart(tmp_path):
    counts = [2.0 ** k for k in range(4, 17)] * 2        # 4 KiB .. 64 MiB of float32 rows of 256
    shares = [0.0] * 13 + [0.5, 0.9, 1.0] * 4 + [0.7]
    model = roofline.fit(_set(counts, shares, 3000.0))
    assert model.zero_us_per_mib == pytest.approx(3000.0, rel=0.05)
    vocab = pd.DataFrame({"M": [50257.0, 50257.0], "N": [256.0, 256.0], "Z": [0.0, 0.97]})
    assert model.predict(vocab) == pytest.approx(_law(vocab, 3000.0), rel=0.05)
    assert model.predict(vocab)[1] > 3 * model.predict(vocab)[0]
    assert model.predict(vocab[["M", "N"]])[0] == pytest.approx(model.predict(vocab)[0])  # no Z: no zeros
    again = load_dir(model.save(tmp_path / "sqrt"))
    assert np.allclose(again.predict(vocab), model.predict(vocab))


def test_without_zero_rows_no_term_and_a_missing_z_means_zero():
    model = roofline.fit(_set([2.0 ** k for k in range(4, 17)], [0.0] * 13, 3000.0))
    assert model.zero_us_per_mib == 0.0
    mixed = pd.DataFrame({"M": [10.0, 20.0], "N": [4.0, 4.0], "Z": [np.nan, 0.5]})
    assert feats.with_optional("sqrt", mixed)["Z"].tolist() == [0.0, 0.5]
    assert feats.with_optional("sqrt", mixed[["M", "N"]])["Z"].tolist() == [0.0, 0.0]
    assert "Z" not in feats.with_optional("div", mixed[["M", "N"]]).columns
    assert opcost.numel(mixed).tolist() == [40.0, 80.0]               # a share is not a size
