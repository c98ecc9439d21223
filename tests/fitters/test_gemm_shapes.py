"""GEMM-shaped ops priced from their GEMM shapes: the backward GEMMs of linear (fully_connected) and bmm against shapes
worked out by hand, the pricing sum, save/load, and the shapes of real imported NeuSight rows."""
from __future__ import annotations

import gzip
import io

import numpy as np
import pandas as pd
import pytest

from fitters import gemm_shapes
from fitters.model import load_dir
from fitters.roofline import RooflineModel


def frames(parts: list[pd.DataFrame]) -> list[tuple[float, ...]]:
    return [tuple(row) for part in parts for row in part[["B", "M", "N", "K"]].itertuples(index=False)]


def test_linear_backward_gemms_by_hand():
    # X[B=2, M=3, K=7] · W[N=5, K=7]^T -> Y[2, 3, 5]: one GEMM of 6 x 7 by 7 x 5
    params = pd.DataFrame({"B": [2.0], "M": [3.0], "N": [5.0], "K": [7.0]})
    assert frames(gemm_shapes.shapes("fully_connected", "fwd", params)) == [(1, 6, 5, 7)]
    # dX[6, 7] = dY[6, 5] · W[5, 7]: M=6, N=7, K=5;  dW[5, 7] = dY^T[5, 6] · X[6, 7]: M=5, N=7, K=6
    assert frames(gemm_shapes.shapes("fully_connected", "bwd", params)) == [(1, 6, 7, 5), (1, 5, 7, 6)]
    for alias in ("linear", "addmm", "mm", "matmul"):
        assert frames(gemm_shapes.shapes(alias, "bwd", params)) == [(1, 6, 7, 5), (1, 5, 7, 6)]


def test_bmm_backward_gemms_by_hand():
    # X[2, 3, 7] · Y[2, 7, 5] -> Z[2, 3, 5]
    params = pd.DataFrame({"B": [2.0], "M": [3.0], "N": [5.0], "K": [7.0]})
    assert frames(gemm_shapes.shapes("bmm", "fwd", params)) == [(2, 3, 5, 7)]
    # dX[2, 3, 7] = dZ[2, 3, 5] · Y^T[2, 5, 7]: M=3, N=7, K=5;  dY[2, 7, 5] = X^T[2, 7, 3] · dZ[2, 3, 5]: M=7, N=5, K=3
    assert frames(gemm_shapes.shapes("bmm", "bwd", params)) == [(2, 3, 7, 5), (2, 7, 5, 3)]
    assert frames(gemm_shapes.shapes("baddbmm", "bwd", params)) == [(2, 3, 7, 5), (2, 7, 5, 3)]


def test_every_backward_gemm_does_the_forward_work():
    rng = np.random.default_rng(0)
    params = pd.DataFrame(rng.integers(1, 300, size=(50, 4)).astype(float), columns=["B", "M", "N", "K"])
    for op in ("fully_connected", "bmm"):
        fwd = gemm_shapes.shapes(op, "fwd", params)[0]
        flops = fwd.prod(axis=1).to_numpy()
        for part in gemm_shapes.shapes(op, "bwd", params):
            np.testing.assert_allclose(part.prod(axis=1).to_numpy(), flops)


def test_not_a_gemm_is_refused():
    with pytest.raises(ValueError, match="not a GEMM-shaped op"):
        gemm_shapes.shapes("relu", "bwd", pd.DataFrame({"M": [1.0], "N": [2.0]}))


def test_price_sums_the_forward_model_over_the_gemms_and_survives_save_load(tmp_path):
    base = RooflineModel("fully_connected", "fwd", "float32", 1e12, 1e11, t0_us=5.0, eff_flops=0.5, eff_bw=0.8,
                         calibrated=True)
    params = pd.DataFrame({"B": [1.0, 1.0, 4.0], "M": [64.0, 4096.0, 128.0], "N": [1024.0, 4096.0, 77.0],
                           "K": [512.0, 1024.0, 3.0]})
    model = gemm_shapes.GemmShapesModel(base, "fully_connected", "bwd")
    expected = sum(base.predict(part.drop(columns=["B"])) for part in gemm_shapes.shapes("fully_connected", "bwd",
                                                                                          params))
    np.testing.assert_allclose(model.predict(params), expected)
    loaded = load_dir(model.save(tmp_path / "m"))
    assert isinstance(loaded, gemm_shapes.GemmShapesModel) and loaded.base_family == "roofline"
    np.testing.assert_allclose(loaded.predict(params), model.predict(params))
    forward = gemm_shapes.GemmShapesModel(base, "linear", "fwd")
    np.testing.assert_allclose(forward.predict(params), base.predict(params.assign(M=params["M"] * params["B"],
                                                                                   B=1.0)))


def test_a_gemm_beyond_the_trained_rows_is_priced_transposed(tmp_path):
    gemm = pd.DataFrame({"B": [1.0] * 4, "M": [50257.0, 100.0, 50257.0, 9000.0], "N": [1280.0, 1280.0, 70000.0,
                                                                                          9000.0],
                         "K": [8192.0] * 4})
    bounds = {"M": 8192.0, "N": 65519.0}
    out = gemm_shapes.orient(gemm, bounds)
    # only the first: M above the trained rows, N within them, and both fit once swapped
    assert out[["M", "N"]].values.tolist() == [[1280.0, 50257.0], [100.0, 1280.0], [50257.0, 70000.0],
                                               [9000.0, 9000.0]]
    assert gemm_shapes.orient(gemm, None) is gemm
    base = RooflineModel("fully_connected", "fwd", "float32", 1e12, 1e11)
    model = gemm_shapes.GemmShapesModel(base, "fully_connected", "bwd", bounds=bounds)
    loaded = load_dir(model.save(tmp_path / "m"))
    assert loaded.bounds == bounds
    np.testing.assert_allclose(loaded.predict(gemm), model.predict(gemm))


def test_rows_beyond_the_trained_ones_are_priced_in_chunks():
    gemm = pd.DataFrame({"B": [1.0] * 4, "M": [8192.0, 16384.0, 32768.0, 20000.0], "N": [1024.0] * 4,
                         "K": [4096.0] * 4})
    chunked, count = gemm_shapes.chunk_rows(gemm, 8192.0)
    assert count.tolist() == [1, 2, 4, 3] and chunked["M"].tolist() == [8192.0, 8192.0, 8192.0, 6667.0]
    assert gemm_shapes.chunk_rows(gemm, None)[0] is gemm
    # a learned base that saturates beyond its rows (here: M clipped at 8192) no longer does
    flat = RooflineModel("fully_connected", "fwd", "float32", 1e12, 1e11, t0_us=5.0)
    flat.predict = lambda frame, base=flat.predict: base(frame.assign(M=frame["M"].clip(upper=8192.0)))
    model = gemm_shapes.GemmShapesModel(flat, "fully_connected", "fwd", bounds={"M": 8192.0, "N": 8192.0})
    times = model.predict(gemm)
    assert times[1] / times[0] == pytest.approx(2.0) and times[2] / times[0] == pytest.approx(4.0)
    assert times[3] / times[0] == pytest.approx(20000 / 8192, rel=0.01)
    assert flat.predict(gemm)[2] == pytest.approx(flat.predict(gemm)[0])


def test_imported_neusight_linear_rows_give_the_gemms_cublas_ran(shared_data):
    """Real V100 linear rows: pmdb's (M, N, K) after import are the rows, output columns and reduction, so the
    forward GEMM's output tiles match the cuBLAS grid (Grid x = ceil(N / tile rows), Grid y = ceil(M / tile cols)),
    and the backward GEMMs are worked out from them as above."""
    from collectors.importers import neusight

    raw = gzip.decompress((shared_data / "gpu_kernels" / "neusight" / "Tesla_V100-PCIE-32GB" / "linear.csv.gz")
                          .read_bytes())
    table = pd.read_csv(io.BytesIO(raw)).sample(300, random_state=0)
    table = table[table["Kernel Name"].str.contains(r"sgemm_\d+x\d+_tn", regex=True)]
    assert len(table) > 50
    op, _, mapping = neusight.OPS["linear"]
    assert op == "fully_connected"
    shape = mapping({c: table[c].to_numpy(dtype=float) for c in ("B", "M", "N", "K")})
    params = pd.DataFrame({c: np.broadcast_to(np.asarray(shape[c], dtype=float), len(table)) for c in "BMNK"})
    tile = table["Kernel Name"].str.extract(r"sgemm_(\d+)x(\d+)_tn").astype(float)
    fwd = gemm_shapes.shapes("fully_connected", "fwd", params)[0]
    np.testing.assert_array_equal(np.ceil(fwd["N"].to_numpy() / tile[0].to_numpy()), table["Grid x"].to_numpy())
    np.testing.assert_array_equal(np.ceil(fwd["M"].to_numpy() / tile[1].to_numpy()), table["Grid y"].to_numpy())
    dx, dw = gemm_shapes.shapes("fully_connected", "bwd", params)
    np.testing.assert_array_equal(dx[["M", "N", "K"]].to_numpy(), fwd[["M", "K", "N"]].to_numpy())
    np.testing.assert_array_equal(dw[["M", "N", "K"]].to_numpy(), fwd[["N", "K", "M"]].to_numpy())


def _neusight_gemm(shared_data, table: str, rows: int) -> tuple[pd.DataFrame, np.ndarray]:
    """A seeded sample of a real V100 NeuSight GEMM table as pmdb parameters and single-call µs."""
    from collectors.importers import neusight

    raw = gzip.decompress((shared_data / "gpu_kernels" / "neusight" / "Tesla_V100-PCIE-32GB" / f"{table}.csv.gz")
                          .read_bytes())
    sample = pd.read_csv(io.BytesIO(raw)).sample(rows, random_state=0)
    _, _, mapping = neusight.OPS[table]
    shape = mapping({c: sample[c].to_numpy(dtype=float) for c in ("B", "M", "N", "K")})
    params = pd.DataFrame({c: np.broadcast_to(np.asarray(shape[c], dtype=float), rows) for c in "BMNK"})
    return params, sample["Latency"].to_numpy(dtype=float) * 1e3


@pytest.mark.parametrize("family", ["gbdt", "mlp"])
def test_forward_gemm_models_scale_by_waves_beyond_the_table_rows(shared_data, tmp_path, family):
    """A learned forward GEMM model (fitted on real V100 linear / bmm rows, M <= 8192 / B, M <= 1025) prices a GEMM
    2x and 4x beyond its trained rows (or bmm batches) at 2x and 4x the largest trained one (a tree alone is flat
    beyond its data; an MLP's growth there is whatever its last layer extrapolates)."""
    from fitters import gbdt, mlp
    from fitters.model import TrainConfig, TrainingSet

    for table, op in (("linear", "fully_connected"), ("bmm", "bmm")):
        params, times = _neusight_gemm(shared_data, table, 1500)
        training = TrainingSet(op, "fwd", "float32", params, times, np.arange(len(params)).astype(str))
        model = (gbdt.fit(training, 0, 2.0, max_trials=1) if family == "gbdt" else
                 mlp.fit(training, 0, 2.0, TrainConfig(max_trials=1, max_epochs=60, min_epochs=20)))
        bounds = model.gemm_bounds
        assert bounds["M"] == params["M"].max() and bounds["N"] == params["N"].max()
        assert ("B" in bounds) == (op == "bmm")
        base = {"B": 1.0, "M": bounds["M"], "N": 1024.0 if op == "bmm" else bounds["N"], "K": 1024.0}
        grow = ["M", "B"] if op == "bmm" else ["M"]
        for dim in grow:
            if op == "bmm":
                base["B"] = 8.0 if dim == "M" else bounds["B"]
            gemm = pd.DataFrame([{**base, dim: base[dim] * f} for f in (1, 2, 4)])
            times_out = model.predict(gemm)
            assert times_out[1] / times_out[0] == pytest.approx(2.0, rel=0.02), (op, dim)
            assert times_out[2] / times_out[0] == pytest.approx(4.0, rel=0.02), (op, dim)
        inside = params.iloc[:50]
        np.testing.assert_array_equal(model.predict(inside), model._predict(inside))
        loaded = load_dir(model.save(tmp_path / f"{family}-{op}"))
        assert loaded.gemm_bounds == bounds
        np.testing.assert_allclose(loaded.predict(gemm), model.predict(gemm), rtol=1e-6)


def test_a_batched_linear_is_one_gemm_of_its_rows():
    seen = []

    def predict(frame: pd.DataFrame) -> np.ndarray:
        seen.append(frame.copy())
        return frame["M"].to_numpy(dtype=float)

    bounds = gemm_shapes.forward_bounds("fully_connected", "fwd", pd.DataFrame({"B": [1.0, 1.0], "M": [8.0, 8192.0],
                                                                               "N": [4.0, 70000.0], "K": [2.0, 3.0]}))
    assert bounds == {"M": 8192.0, "N": 70000.0}
    assert gemm_shapes.forward_bounds("relu", "fwd", pd.DataFrame({"M": [1.0]})) is None
    assert gemm_shapes.forward_bounds("fully_connected", "bwd", pd.DataFrame({"M": [1.0]})) is None
    frame = pd.DataFrame({"B": [4.0, 8.0], "M": [2048.0, 2048.0], "N": [70000.0] * 2, "K": [64.0] * 2})
    out = gemm_shapes.scaled_forward(predict, "fully_connected", frame, bounds)
    assert seen[-1]["M"].tolist() == [8192.0, 8192.0] and (seen[-1]["B"] == 1).all()
    assert out.tolist() == [8192.0, 16384.0]        # 4·2048 rows once; 8·2048 rows as two chunks of 8192
