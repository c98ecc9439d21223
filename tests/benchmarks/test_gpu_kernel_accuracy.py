"""benchmarks/gpu_kernel_accuracy.py, part (c): the H200's back-to-back GEMMs read as pmdb's GEMM params and
summarised against what the cross-GPU models priced (the fits themselves are `fitters/cross_gpu.py`'s tests)."""
from pathlib import Path

import pandas as pd
import pytest

from tests.harness import load_benchmark

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gpu_kernels"


def test_shapes_parse_as_gemm_params():
    bench = load_benchmark("gpu_kernel_accuracy")
    assert bench.parse_shape("M=1024 K=4096 N=1024") == {"M": 1024.0, "K": 4096.0, "N": 1024.0}
    assert bench.parse_shape("B=20 M=1024 N=64 K=1024")["B"] == 20.0


@pytest.mark.skipif(not (SHARED / "h200_launch_floor.csv").exists(),
                    reason="../shared/data/gpu_kernels is absent (a user's clone has no ../shared)")
def test_every_device_bound_gemm_of_the_h200_file_has_its_sizes():
    bench = load_benchmark("gpu_kernel_accuracy")
    table = pd.read_csv(SHARED / "h200_launch_floor.csv")
    gemms = table[table["op"].isin(list(bench.LAUNCH_FLOOR_OPS)) & (table["back_to_back_us"] >= bench.DEVICE_BOUND_US)]
    assert len(gemms) >= 10
    for op, shape in zip(gemms["op"], gemms["shape"]):
        sizes = bench.parse_shape(shape)
        assert {"M", "N", "K"} <= set(sizes) and all(v >= 1 for v in sizes.values())
        assert op == "linear" or "B" in sizes
    assert (SHARED / Path(*bench.H200_SHEET)).is_file()


def test_summary_and_section_say_what_was_priced():
    bench = load_benchmark("gpu_kernel_accuracy")
    c = pd.DataFrame({"op": ["fully_connected", "fully_connected", "bmm"],
                      "shape": ["M=1024 K=1024 N=1024", "M=4096 K=4096 N=4096", "B=20 M=1024 N=64 K=1024"],
                      "back_to_back_us": [100.0, 2000.0, 80.0], "single_call_us": [120.0, 2040.0, 95.0],
                      "held_out_us": [80.0, 1500.0, 160.0], "priced_us": [104.0, 1950.0, 160.0]})
    lines = bench.h200_summary(c)
    assert lines[0].startswith("fully_connected, held out: 2 shapes") and "median 0.78 (0.75-0.80)" in lines[0]
    assert lines[1].startswith("fully_connected, priced: 2 shapes") and "median 1.01 (0.97-1.04)" in lines[1]
    assert lines[2].startswith("bmm, held out: 1 shapes") and "median 2.00" in lines[2]
    assert lines[3] == "bmm: no lane correction (priced as held out)"
    table = bench.h200_table(c)
    assert "| bmm | B=20 M=1024 N=64 K=1024 | 80.0 | 95.0 | 160.0 | 2.0 | 160.0 | 2.0 |" in table
    assert "| fully_connected | M=1024 K=1024 N=1024 | 100.0 | 120.0 | 80.0 | 0.8 | 104.0 | 1.04 |" in table
