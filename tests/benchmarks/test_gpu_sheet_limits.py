"""benchmarks/gpu_sheet_limits.py: shares of the sheet's FP32 rate from a real NeuSight GEMM table, the duration
bins and the long / short ratio, a GPU's level taken out and the narrow-GEMM classes on known numbers, and bad
options refused in one line."""
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.harness import load_benchmark

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gpu_kernels" / "neusight"


def test_share_of_a_known_gemm_and_the_bins():
    bench = load_benchmark("gpu_sheet_limits")
    # 2 x 1024^3 FLOP in 1000 µs on a 4294.97 GFLOP/s sheet: share 0.5; the 256-row GEMM is left out
    frame = pd.DataFrame({"B": [1, 1], "M": [1024, 256], "N": [1024, 1024], "K": [1024, 1024]})
    share, ms = bench.utilisation("linear", frame, np.array([1000.0, 10.0]), 2 * 1024 ** 3 / 1e3 / 0.5 / 1e3)
    assert share.tolist() == pytest.approx([0.5]) and ms.tolist() == [1.0]
    shares = np.r_[np.full(5, 0.8), np.full(5, 0.4)]
    times = np.r_[np.full(5, 2.0), np.full(5, 50.0)]
    bins = bench.by_duration(shares, times)
    assert bins[2] == (0.8, 5) and bins[5] == (0.4, 5) and math.isnan(bins[0][0])
    assert bench.held(shares, times) == pytest.approx(0.5)
    assert math.isnan(bench.held(shares[:4], times[:4]))


@pytest.mark.skipif(not (SHARED / "Tesla_T4" / "linear.csv.gz").exists(),
                    reason="../shared/data/gpu_kernels/neusight is absent (a user's clone has no ../shared)")
def test_real_table_shares_are_physical():
    bench = load_benchmark("gpu_sheet_limits")
    tables = bench.device_times(SHARED / "Tesla_T4")
    assert set(tables) == {"linear", "bmm"}
    frame, device = tables["linear"]
    latency = frame["Latency"].to_numpy() * 1000.0
    assert (device > 0).all() and (device < latency).all()
    share, ms = bench.utilisation("linear", frame, device, 8141.0)
    assert len(share) > 1000 and (share > 0.05).all() and (share < 1.0).all()


def test_a_level_taken_out_and_the_narrow_classes():
    bench = load_benchmark("gpu_sheet_limits")
    measured = np.array([100.0, 200.0, 400.0])
    err, level, removed = bench.level_removed(measured / 2, measured)     # every row at half its time: a level
    assert err == pytest.approx(50.0, rel=1e-3) and level == pytest.approx(2.0) and removed == pytest.approx(0.04)
    err, level, removed = bench.level_removed(measured * np.array([0.5, 2.0, 1.0]), measured)   # shape, not level
    assert level == pytest.approx(1.0) and removed == pytest.approx(err)
    params = pd.DataFrame({"M": [1024, 1024, 1024], "N": [64, 1024, 1024], "K": [1024, 64, 1024]})
    got = bench.narrow_ratios(params, np.array([2.0, 1.0, 3.0]), np.array([1.0, 1.0, 1.0]))
    assert got == {"output <= 64, reduction >= 512": (2.0, 1), "reduction <= 64, output >= 512": (1.0, 1),
                   "every dimension >= 512": (3.0, 1)}


def test_bad_options_are_one_line(tmp_path, capsys):
    bench = load_benchmark("gpu_sheet_limits")
    assert bench.main(["--gpus", "h100"]) == 2
    assert "unknown GPU h100" in capsys.readouterr().err
    assert bench.main(["--shared", str(tmp_path)]) == 2
    assert "is missing" in capsys.readouterr().err
