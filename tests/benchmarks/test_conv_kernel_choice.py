"""benchmarks/conv_kernel_choice.py: device times as pmdb imports them, both fits scored on held-out rows of a real
NeuSight conv table, and bad options refused in one line."""
from pathlib import Path

import numpy as np
import pytest

from tests.harness import load_benchmark

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gpu_kernels" / "neusight"


@pytest.mark.skipif(not (SHARED / "Tesla_T4" / "conv.csv.gz").exists(),
                    reason="../shared/data/gpu_kernels/neusight is absent (a user's clone has no ../shared)")
def test_device_times_and_both_fits_on_a_real_table():
    bench = load_benchmark("conv_kernel_choice")
    conv, device = bench.device_times(SHARED / "Tesla_T4")
    latency = conv["Latency"].to_numpy() * 1000.0
    assert len(device) == len(conv) > 4000
    assert (device > 0).all() and (device < latency).all()
    sample = np.random.default_rng(0).choice(len(conv), 800, replace=False)
    got = bench.score(conv.iloc[sample].reset_index(drop=True), device[sample], seed=0)
    assert got["rows"] == 800 and got["kernel_sets"] > 1
    assert 0 < got["shape"] < 100 and 0 < got["oracle"] < 100 and len(got["quartiles"]) == 4


def test_bad_options_are_one_line(tmp_path, capsys):
    bench = load_benchmark("conv_kernel_choice")
    assert bench.main(["--gpus", "h100"]) == 2
    assert "unknown GPU h100" in capsys.readouterr().err
    assert bench.main(["--shared", str(tmp_path)]) == 2
    assert "is missing" in capsys.readouterr().err
