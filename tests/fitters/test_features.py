import numpy as np
import pandas as pd
import pytest

from fitters import features as feats
from pmdb.errors import PmdbError


def _params():
    return feats.params_frame(['{"B": 1, "M": 4, "N": 8, "K": 16}', {"B": 1, "M": 64, "N": 8, "K": 32},
                               {"B": 1, "M": 256, "N": 16, "K": 16}])


def test_spec_logs_positive_params_keeps_constants_and_round_trips():
    params = _params()
    spec = feats.build_spec("fully_connected", "fwd", "float32", params)
    assert spec.params == ("K", "M", "N") and all(spec.logged)
    assert spec.constants == {"B": 1.0}
    assert spec.names == ["ln_K", "ln_M", "ln_N", "ln_flops", "ln_bytes"]
    x = feats.transform(spec, params)
    assert np.allclose(x[:, 1], np.log(params["M"]))
    flops = 2 * params["M"] * params["N"] * params["K"]
    assert np.allclose(x[:, 3], np.log1p(flops))
    # B (constant in training) may be left out at prediction time; the spec survives JSON
    again = feats.FeatureSpec.from_dict(spec.to_dict())
    assert np.allclose(feats.transform(again, params.drop(columns=["B"])), x)


def test_raw_values_for_non_positive_params():
    params = pd.DataFrame({"M": [2.0, 4.0, 8.0], "diag": [0.0, 1.0, 0.0]})
    spec = feats.build_spec("tril", "fwd", "float32", params)
    assert dict(zip(spec.params, spec.logged)) == {"M": True, "diag": False}
    assert np.array_equal(feats.transform(spec, params)[:, 1], [0.0, 1.0, 0.0])


def test_missing_and_bad_params_are_user_errors():
    spec = feats.build_spec("fully_connected", "fwd", "float32", _params())
    with pytest.raises(PmdbError, match="needs parameters M"):
        feats.transform(spec, pd.DataFrame({"N": [1.0], "K": [2.0]}))
    with pytest.raises(PmdbError, match="positive"):
        feats.transform(spec, pd.DataFrame({"M": [0.0], "N": [1.0], "K": [2.0]}))
    with pytest.raises(PmdbError, match="not numeric: M"):
        feats.params_frame([{"M": "big"}])


def test_embedding_tables_pad_and_check_lists():
    frame = pd.DataFrame({"batch_size": [128, [64, 64]], "num_rows": [[1000], [10, 20]],
                          "pooling_mean": [[3.0], [0.0, 5.0]], "dim": [[16], [8, 32]],
                          "reuse_factors": [[[1.0] + [0.0] * 16], [[0.5] * 2 + [0.0] * 15] * 2]})
    tables, mask = feats.embedding_tables(frame)
    assert tables.shape == (2, 2, 21) and mask.tolist() == [[1, 0], [1, 1]]
    assert np.isclose(tables[0, 0, 0], np.log(128)) and np.isclose(tables[1, 1, 3], np.log(32))
    assert np.isfinite(tables).all()  # an empty lookup (L = 0) stays finite
    bad = frame.assign(dim=[[16], [8]])
    with pytest.raises(PmdbError, match="inconsistent tables"):
        feats.embedding_tables(bad)
    with pytest.raises(PmdbError, match="needs columns reuse_factors"):
        feats.embedding_tables(frame.drop(columns=["reuse_factors"]))


def test_conv2d_gets_its_implicit_gemm_features_and_older_specs_still_transform():
    """conv2d [B, IC, H, H] * [OC, IC, 3, 3], stride 1, no padding in H (pmdb's H includes it): the implicit GEMM
    has M = B·OH·OW output pixels, N = OC, K = IC·9, ceil(M/128)·ceil(N/64) output tiles."""
    params = pd.DataFrame({"B": [1.0, 8.0, 32.0], "IC": [3.0, 64.0, 256.0], "OC": [64.0, 128.0, 512.0],
                           "H": [34.0, 58.0, 16.0], "FH": 3.0, "FW": 3.0, "stride": 1.0, "dilation": 1.0,
                           "is_depthwise": 0.0})
    spec = feats.build_spec("conv2d", "fwd", "float32", params)
    assert spec.derived == (*feats.DERIVED, *feats.CONV_DERIVED)
    x = pd.DataFrame(feats.transform(spec, params), columns=spec.names)
    oh = params["H"] - 2
    m, n, k = params["B"] * oh * oh, params["OC"], params["IC"] * 9
    np.testing.assert_allclose(np.exp(x["ln_gemm_m"]), m)
    np.testing.assert_allclose(np.exp(x["ln_gemm_n"]), n)
    np.testing.assert_allclose(np.exp(x["ln_gemm_k"]), k)
    np.testing.assert_allclose(np.exp(x["ln_tiles"]), np.ceil(m / 128) * np.ceil(n / 64))
    np.testing.assert_allclose(np.exp(x["ln_intensity"]), np.exp(x["ln_flops"] - x["ln_bytes"]), rtol=1e-4)
    assert x["ln_intensity"].is_monotonic_increasing          # bigger convs reuse each byte more
    # a conv model saved before these features (derived = ln_flops, ln_bytes) transforms as it did
    old = feats.FeatureSpec.from_dict({**spec.to_dict(), "derived": list(feats.DERIVED)})
    np.testing.assert_allclose(feats.transform(old, params), x[old.names].to_numpy())
    # other ops keep the two derived features
    assert feats.build_spec("fully_connected", "fwd", "float32", _params()).derived == feats.DERIVED
