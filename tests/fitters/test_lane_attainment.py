"""The lane correction of the cross-GPU models (pmdb/samples/lane_attainment): which GPUs and ops it applies to,
how it is saved with a version, and that the shipped sample is what its own measurements say."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors import gpu_specs
from fitters import cross_gpu
from pmdb.samples import lane_attainment

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = lane_attainment.load()


def test_the_factor_grows_with_the_sm_width_beyond_the_sources():
    assert SAMPLE.lanes_per_sm == 128 and SAMPLE.source_lanes_per_sm == 64 and SAMPLE.ops == ("fully_connected",)
    assert SAMPLE.factor(64) == SAMPLE.factor(32) == SAMPLE.factor(math.nan) == SAMPLE.factor(0) == 1.0
    assert SAMPLE.factor(128) == SAMPLE.factor(192) == SAMPLE.time_factor > 1
    assert SAMPLE.factor(96) == pytest.approx(SAMPLE.time_factor ** (math.log(1.5) / math.log(2)))
    assert lane_attainment.LaneAttainment.from_dict(json.loads(json.dumps(SAMPLE.as_dict()))) == SAMPLE


def test_the_correction_goes_with_gemm_models_of_narrow_sources_only():
    narrow = pd.DataFrame({"cores_per_sm": [64.0, 64.0]})
    assert cross_gpu.lanes_for("fully_connected", narrow) == SAMPLE
    assert cross_gpu.lanes_for("linear", narrow) == SAMPLE             # an alias of the same GEMM
    assert cross_gpu.lanes_for("bmm", narrow) is None                 # not measured to need it
    assert cross_gpu.lanes_for("layer_norm", narrow) is None
    wide = pd.DataFrame({"cores_per_sm": [64.0, 128.0]})
    assert cross_gpu.lanes_for("fully_connected", wide) is None        # the trees saw a wide SM
    unknown = pd.DataFrame({"cores_per_sm": [64.0, math.nan]})
    assert cross_gpu.lanes_for("fully_connected", unknown) is None     # a source of unknown width
    assert cross_gpu.lanes_for("fully_connected", pd.DataFrame(index=range(2))) is None


def _gemm_data(widths: dict[str, int]) -> cross_gpu.CrossGpuData:
    """A small GEMM table per GPU: time = FLOPs at a fixed share of each GPU's sheet, plus 5 µs."""
    rng = np.random.default_rng(0)
    frames, specs, gpus = [], [], []
    for gpu, lanes in widths.items():
        peak = 1e13 * (1 + len(gpus) % 3)
        params = pd.DataFrame({"B": 1.0, "M": rng.choice([256.0, 1024.0, 4096.0], 60),
                               "N": rng.choice([512.0, 2048.0], 60), "K": rng.choice([256.0, 1024.0], 60)})
        frames.append(params)
        specs.append(pd.DataFrame({"fp32_flops": peak, "mem_bw": 9e11, "sm_count": 80.0, "cores_per_sm": lanes,
                                   "clock_mhz": 1400.0, "l2_bytes": 6.0 * 2 ** 20}, index=range(60)))
        gpus += [gpu] * 60
    params, spec = pd.concat(frames, ignore_index=True), pd.concat(specs, ignore_index=True)
    times = 2 * params["M"] * params["N"] * params["K"] / (0.6 * spec["fp32_flops"]) * 1e6 + 5.0
    n = len(params)
    return cross_gpu.CrossGpuData("fully_connected", "float32", params, times.to_numpy(), np.array(gpus),
                                  np.arange(n).astype(str), spec, np.arange(n), np.zeros(n, dtype=int))


def test_a_wide_target_is_priced_by_the_factor_and_a_saved_version_keeps_it(tmp_path):
    data = _gemm_data({"a": 64, "b": 64, "c": 64})
    model = cross_gpu.fit(data, seed=0)
    assert model.lanes == SAMPLE
    rows = data.params.iloc[:10]
    narrow = gpu_specs.GpuSheet("narrow", 2e13, 9e11, 80, 64, 1400.0, 6 * 2 ** 20)
    wide = gpu_specs.GpuSheet("wide", 2e13, 9e11, 80, 128, 1400.0, 6 * 2 ** 20)
    bare = cross_gpu.fit(data, seed=0, lanes=False)
    assert bare.lanes is None
    np.testing.assert_allclose(model.for_gpu(narrow, "n").predict(rows), bare.for_gpu(narrow, "n").predict(rows))
    np.testing.assert_allclose(model.for_gpu(wide, "w").predict(rows),
                               bare.for_gpu(wide, "w").predict(rows) * SAMPLE.time_factor)
    # per-row specs: each row its own width
    mixed = pd.concat([rows.assign(**narrow.features()), rows.assign(**wide.features())], ignore_index=True)
    ratio = model.predict(mixed) / bare.predict(mixed)
    np.testing.assert_allclose(ratio, [1.0] * 10 + [SAMPLE.time_factor] * 10)
    bound = model.for_gpu(wide, "w")
    loaded = cross_gpu.CrossGpuModel.from_saved(json.loads(json.dumps(bound.config())), bound.save(tmp_path / "m"))
    np.testing.assert_allclose(loaded.predict(rows), bound.predict(rows))
    before = {k: v for k, v in bound.config().items() if k != "lanes"}   # a version saved before the correction
    old = cross_gpu.CrossGpuModel.from_saved(before, tmp_path / "m")
    np.testing.assert_allclose(old.predict(rows), bare.for_gpu(wide, "w").predict(rows))
    assert cross_gpu.fit(_gemm_data({"a": 64, "b": 128}), seed=0).lanes is None


def test_the_shipped_factor_is_the_geometric_mean_of_its_measured_shapes():
    document = json.loads(lane_attainment.TABLE.read_text())
    shapes = pd.DataFrame(document["shapes"])
    assert len(shapes) >= 5 and (shapes["back_to_back_us"] >= 60).all()
    np.testing.assert_allclose(shapes["ratio"], shapes["back_to_back_us"] / shapes["priced_us"], rtol=1e-3)
    assert SAMPLE.time_factor == pytest.approx(np.exp(np.log(shapes["ratio"]).mean()), rel=1e-3)
    assert document["spread"] == pytest.approx([shapes["ratio"].min(), shapes["ratio"].max()])
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from make_lane_sample import leave_one_out
    priced, measured = shapes["priced_us"].to_numpy(), shapes["back_to_back_us"].to_numpy()
    assert document["leave_one_shape_out_gmae_pct"] == pytest.approx(leave_one_out(priced, measured), abs=0.01)
    assert leave_one_out(np.array([10.0, 20.0, 30.0]), np.array([12.0, 24.0, 36.0])) < 0.05   # one factor fits all
    # two shapes, x1 and x2: each priced with the other's factor is off by +100 % and -50 %
    assert leave_one_out(np.array([10.0, 10.0]), np.array([10.0, 20.0])) == \
        pytest.approx(100 * (np.sqrt(1.0004 * 0.5004) - 4e-4), rel=1e-6)
