"""The cross-GPU family on small slices of the real NeuSight tables (../shared/data; skipped without it): the wave
roofline by hand, fit/predict through the MLflow registry, leave-one-GPU-out, a spec-only target from the CLI, and the
one-line errors."""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors import gpu_specs
from fitters import cross_gpu, gemm_shapes
from fitters.load import load_model
from pmdb.cli import fit as cli_fit, fit_cross_gpu
from pmdb.config import Workspace
from pmdb.samples import lane_attainment
from pmdb.store import Store

from .conftest import cli, one_line_error

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
NEUSIGHT = SHARED / "gpu_kernels" / "neusight"
SOURCES = {"p4": "Tesla_P4", "t4": "Tesla_T4", "v100": "Tesla_V100-PCIE-32GB"}
OPS = ("linear", "bmm", "ln", "add")
ROWS = 250


def write_slice(gpu_dir: str, op: str, out: Path, rows: int, seed: int = 0) -> Path:
    """A seeded sample of ``rows`` rows of a real table, written as <out>/<op>.csv.gz."""
    table = pd.read_csv(NEUSIGHT / gpu_dir / f"{op}.csv.gz", dtype=str, keep_default_na=False)
    table = table.sample(min(rows, len(table)), random_state=seed)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{op}.csv.gz"
    table.to_csv(path, index=False, compression="gzip")
    return path


@pytest.fixture(scope="module")
def gpu_template(tmp_path_factory, mlflow_template) -> Workspace:
    """A workspace with ROWS-row slices of four ops on three GPUs, their sheets, the L4 sheet (no tables) and a GPU
    with tables but no sheet; MLflow store created."""
    if not NEUSIGHT.is_dir():
        pytest.skip(f"shared data not present at {SHARED}")
    root = tmp_path_factory.mktemp("crossgpu")
    ws = Workspace(root / "ws")
    Store.open(ws, create=True).close()
    shutil.copy(mlflow_template.mlflow_db, ws.mlflow_db)
    for name, gpu_dir in SOURCES.items():
        for i, op in enumerate(OPS):
            write_slice(gpu_dir, op, root / name, ROWS, seed=i)
        assert cli(ws.home, "platform-specs", NEUSIGHT / "device_configs" / f"{gpu_dir}.json", "--name", name)[0] == 0
        assert cli(ws.home, "collect", "import-ops", root / name, "--format", "neusight", "--platform", name)[0] == 0
    assert cli(ws.home, "platform-specs", NEUSIGHT / "device_configs" / "NVIDIA_L4.json", "--name", "l4")[0] == 0
    write_slice("Tesla_P100-PCIE-16GB", "ln", root / "nosheet", 50)
    assert cli(ws.home, "collect", "import-ops", root / "nosheet", "--format", "neusight",
               "--platform", "nosheet")[0] == 0
    return ws


@pytest.fixture
def gpu_ws(shared_data, gpu_template, tmp_path) -> Workspace:
    """A private copy of the template (tests register versions)."""
    target = tmp_path / "ws"
    shutil.copytree(gpu_template.home, target)
    return Workspace(target)


@pytest.fixture(scope="module")
def ln_data(gpu_template) -> cross_gpu.CrossGpuData:
    with Store.open(gpu_template, read_only=True) as store:
        return cross_gpu.load_data(store, "layer_norm")


V100 = pd.DataFrame({"fp32_flops": [14.029e12], "mem_bw": [900e9], "sm_count": [80.0], "cores_per_sm": [64.0],
                     "clock_mhz": [1370.0], "l2_bytes": [6 * 2.0 ** 20]})


def test_wave_roofline_by_hand():
    # a 1024 x 1024 x 1024 GEMM: 8 x 8 = 64 output tiles of 128 x 128, one wave on 80 SMs; each SM computes one tile
    # (2·128·128·1024 FLOP) at peak / 80, which is slower than its bytes at bandwidth / 80
    params = pd.DataFrame({"B": [1.0], "M": [1024.0], "N": [1024.0], "K": [1024.0]})
    work = cross_gpu.work_frame("fully_connected", "fwd", "float32", params, V100)
    assert work["tiles"].iloc[0] == 64 and work["waves"].iloc[0] == 1
    assert work["fill"].iloc[0] == pytest.approx(64 / 80)
    tile_us = 2 * 128 * 128 * 1024 / (14.029e12 / 80) * 1e6
    assert work["roof_us"].iloc[0] == pytest.approx(tile_us)
    assert work["kernel_roof_us"].iloc[0] == pytest.approx(2 * 1024 ** 3 / 14.029e12 * 1e6)
    # 81 tiles need two waves on 80 SMs
    two = cross_gpu.work_frame("fully_connected", "fwd", "float32",
                               pd.DataFrame({"B": [1.0], "M": [9 * 128.0], "N": [9 * 128.0], "K": [64.0]}), V100)
    assert two["waves"].iloc[0] == 2
    # element-wise: 512 elements per block, 4 resident per SM; memory bound
    add = cross_gpu.work_frame("add", "fwd", "float32", pd.DataFrame({"M": [4096.0], "N": [4096.0]}), V100)
    assert add["tiles"].iloc[0] == 4096 * 4096 / 512
    assert add["kernel_roof_us"].iloc[0] == pytest.approx(3 * 4 * 4096 * 4096 / 900e9 * 1e6)


L4 = pd.DataFrame({"fp32_flops": [31.334e12], "mem_bw": [300e9], "sm_count": [60.0], "cores_per_sm": [128.0],
                   "clock_mhz": [2040.0], "l2_bytes": [48 * 2.0 ** 20]})


def test_a_gemm_wave_is_bound_by_its_flops_on_a_high_ratio_sheet():
    # the L4's 104 FLOP/B: a 128 x 128 tile's own operands at bandwidth / 60 would take 3x its FLOPs at peak / 60;
    # they come through L2, so the wave is its FLOPs, and the kernel's bytes (each operand once) bound the kernel
    params = pd.DataFrame({"B": [1.0], "M": [1024.0], "N": [1024.0], "K": [1024.0]})
    work = cross_gpu.work_frame("fully_connected", "fwd", "float32", params, L4)
    tile_us = 2 * 128 * 128 * 1024 / (31.334e12 / 60) * 1e6
    assert work["waves"].iloc[0] == 2 and work["roof_us"].iloc[0] == pytest.approx(2 * tile_us)
    old = cross_gpu.work_frame("fully_connected", "fwd", "float32", params, L4, tile_bytes_bound=True)
    assert old["roof_us"].iloc[0] > 2.5 * work["roof_us"].iloc[0]           # what feature set 1 priced
    thin = pd.DataFrame({"B": [1.0], "M": [65536.0], "N": [8.0], "K": [8.0]})   # bytes-bound: the kernel roofline
    assert cross_gpu.work_frame("fully_connected", "fwd", "float32", thin, L4)["roof_us"].iloc[0] == \
        pytest.approx(4 * (65536 * 8 * 2 + 64) / 300e9 * 1e6, rel=0.01)
    add = cross_gpu.work_frame("add", "fwd", "float32", pd.DataFrame({"M": [4096.0], "N": [4096.0]}), L4)
    assert add["roof_us"].iloc[0] >= 3 * 4 * 4096 * 4096 / 300e9 * 1e6     # element-wise: bytes still bind


def test_only_convolutions_see_the_sheet_ratios(ln_data, tmp_path):
    assert "ln_intensity_over_ridge" in cross_gpu._feature_names("conv2d", ("B",))
    assert not {"ln_intensity_over_ridge", "ln_bytes_over_l2"} & set(cross_gpu._feature_names("softmax", ("B",)))
    model = cross_gpu.fit(ln_data, seed=0)
    assert model.feature_set == cross_gpu.FEATURE_SET == 2
    assert model.estimator.n_features_in_ == len(cross_gpu._feature_names("layer_norm", model.param_names))
    rows = ln_data.subset(np.flatnonzero(ln_data.gpu == "v100")[:50]).params
    priced = [model.predict(pd.concat([rows, specs.loc[[0] * len(rows)].reset_index(drop=True)], axis=1))
              for specs in (V100, V100.assign(l2_bytes=48 * 2.0 ** 20), V100.assign(fp32_flops=140e12))]
    np.testing.assert_allclose(priced[1], priced[0])      # neither the L2 nor the FP32/bandwidth ratio ...
    np.testing.assert_allclose(priced[2], priced[0])      # ... moves a memory-bound layer norm
    # a version saved before feature set 2 keeps the features it was fitted on
    saved = model.config()
    del saved["feature_set"]
    legacy = cross_gpu.CrossGpuModel.from_saved(saved, model.save(tmp_path / "m"))
    assert legacy.feature_set == 1
    x, _ = cross_gpu._matrix("layer_norm", "float32", rows, V100.loc[[0] * len(rows)], model.param_names,
                             np.ones(len(rows)), feature_set=1)
    assert x.shape[1] == len(model.param_names) + len(cross_gpu.LEGACY_FEATURE_NAMES)


def test_logo_and_held_out_return_finite_errors(ln_data):
    assert sorted(set(ln_data.gpu)) == ["p4", "t4", "v100"] and len(ln_data) == 3 * ROWS
    predictions: dict = {}
    logo = cross_gpu.leave_one_gpu_out(ln_data, seed=0, predictions=predictions)
    assert sorted(logo) == ["p4", "t4", "v100"]
    for gpu, result in logo.items():
        assert math.isfinite(result["gmae"]) and result["gmae"] < 1.0 and result["n"] == ROWS
        predicted, measured = predictions[gpu]
        assert (predicted > 0).all() and len(measured) == ROWS
    held = cross_gpu.held_out(ln_data, seed=0)
    assert sorted(held["per_gpu"]) == ["p4", "t4", "v100"] and math.isfinite(held["all"]["gmae"])
    assert held["all"]["n"] < len(ln_data) / 2           # the 20 % test side only
    again = cross_gpu.leave_one_gpu_out(ln_data, seed=0, gpus=["t4"])
    assert list(again) == ["t4"] and again["t4"]["gmae"] == logo["t4"]["gmae"]   # deterministic for a seed


def test_a_seen_gpu_keeps_its_floor_an_unseen_one_gets_the_median(ln_data):
    model = cross_gpu.fit(ln_data, seed=0)
    assert sorted(model.floors) == ["p4", "t4", "v100"]
    assert model.floor_of("v100") == pytest.approx(np.quantile(ln_data.times_us[ln_data.gpu == "v100"], 0.01))
    assert model.floor_of("l4") == model.floor_us == pytest.approx(np.median(list(model.floors.values())))
    sheet = gpu_specs.GpuSheet("Tesla V100-PCIE-32GB", 14.029e12, 900e9, 80, 64, 1370.0, 6 * 2 ** 20)
    assert model.for_gpu(sheet, "v100").target["floor_us"] == model.floor_of("v100")
    rows = ln_data.subset(np.flatnonzero(ln_data.gpu == "v100")[:20])
    own = model.predict(rows.with_specs(model.floors))
    np.testing.assert_allclose(model.for_gpu(sheet, "v100").predict(rows.params), own)
    assert not np.allclose(model.predict(rows.with_specs()), own)    # the median floor prices them differently
    sparse = model.for_gpu(gpu_specs.GpuSheet("a sheet without L2, cores or clock", 1e13, 5e11, 40), "x")
    assert np.isfinite(sparse.predict(rows.params)).all()
    json.dumps(sparse.config(), allow_nan=False)         # what the registry stores has no NaN


def test_layer_norm_batch_folds_into_rows(ln_data, tmp_path):
    model = cross_gpu.fit(ln_data, seed=0)
    assert model.constants == {"B": 1.0}      # NeuSight's ln is imported as B = 1, M = rows
    bound = model.for_gpu(gpu_specs.GpuSheet("Tesla V100-PCIE-32GB", 14.029e12, 900e9, 80, 64, 1370.0,
                                             6 * 2 ** 20), "v100")
    batched = bound.predict(pd.DataFrame({"B": [8.0], "M": [512.0], "N": [1024.0]}))
    flat = bound.predict(pd.DataFrame({"B": [1.0], "M": [4096.0], "N": [1024.0]}))
    assert batched == pytest.approx(flat)
    loaded = cross_gpu.CrossGpuModel.from_saved(bound.config(), bound.save(tmp_path / "m"))
    np.testing.assert_allclose(loaded.predict(pd.DataFrame({"B": [8.0], "M": [512.0], "N": [1024.0]})), batched)
    with pytest.raises(Exception, match="forward pass only"):
        bound.predict_pass(pd.DataFrame({"B": [1.0], "M": [64.0], "N": [64.0]}), "bwd")


def test_spec_only_target_roundtrip_through_the_registry(gpu_ws):
    options = cross_gpu.CrossGpuOptions(target="l4", ops=["fully_connected", "layer_norm"])
    with Store.open(gpu_ws) as store:
        results, notes = cross_gpu.fit_for_target(store, gpu_ws, options)
        versions = store.query("SELECT name, version, family, pass, test_gmae, n_train, n_test FROM model_versions "
                               "ORDER BY name")
        champions = store.query("SELECT name, version FROM model_aliases WHERE alias = 'champion'")
        data = cross_gpu.load_data(store, "fully_connected")
        sheet = gpu_specs.load(store, "l4")
    assert results.attrs["sources"] == ["p4", "t4", "v100"]
    # the L4's sheet beyond the three sources': said once, and stored with every version
    assert notes == ["l4's sheet lies outside its sources' span: FP32 rate 31.3 TFLOP/s (sources 5.7-14), FP32 "
                     "per byte 104 FLOP/B (sources 15.6-29.7), FP32 lanes per SM 128 (sources 64), L2 48 MiB "
                     "(sources 2-6); its kernels are priced beyond what the sources showed",
                     "l4's SMs have 128 FP32 lanes, its sources' 64: fully_connected priced x1.30, what 128-lane SMs "
                     "took over the same models' price (H200 GEMMs back to back, pmdb/samples/lane_attainment)"]
    assert versions["name"].tolist() == ["fully_connected.bwd.device~l4", "fully_connected.fwd.device~l4",
                                         "layer_norm.fwd.device~l4"]
    fwd = versions[versions["pass"] == "fwd"]
    assert (fwd["family"] == "cross_gpu").all() and (fwd["n_train"] == 3 * ROWS).all()
    assert fwd["test_gmae"].notna().all() and (fwd["n_test"] == 3 * ROWS).all()   # leave-one-GPU-out over 3 sources
    bwd = versions[versions["pass"] == "bwd"].iloc[0]
    assert bwd["family"] == "gemm_shapes" and pd.isna(bwd["test_gmae"]) and bwd["n_test"] == 0
    assert sorted(champions["name"]) == sorted(versions["name"])
    # the registered model is the deterministic fit bound to L4's sheet, saved and loaded through MLflow
    frame = data.params.iloc[:40]
    fresh = cross_gpu.fit(data, seed=0).for_gpu(sheet, "l4")
    loaded = load_model(gpu_ws, "fully_connected.fwd.device~l4", "champion")
    assert isinstance(loaded, cross_gpu.CrossGpuModel) and loaded.target["platform"] == "l4"
    assert sorted(loaded.info["sheet_outside"]) == ["cores_per_sm", "flop_per_byte", "fp32_flops", "l2_bytes"]
    assert loaded.info["sheet_outside"]["cores_per_sm"] == [128.0, 64.0, 64.0]
    assert loaded.target["fp32_flops"] == pytest.approx(31334e9)
    floors = {g: np.quantile(data.times_us[data.gpu == g], cross_gpu.FLOOR_QUANTILE) for g in ("p4", "t4", "v100")}
    assert loaded.floors == pytest.approx(floors)     # L4's floor is unknowable: the sources' median
    assert loaded.target["floor_us"] == pytest.approx(np.median(list(floors.values())))
    np.testing.assert_allclose(loaded.predict(frame), fresh.predict(frame))
    # the L4's 128-lane SMs: the shipped factor over what the same trees price without it, saved with the version
    sample = lane_attainment.load()
    assert loaded.lanes == sample and loaded.config()["lanes"] == sample.as_dict()
    bare = cross_gpu.fit(data, seed=0, lanes=False).for_gpu(sheet, "l4")
    np.testing.assert_allclose(loaded.predict(frame), bare.predict(frame) * sample.time_factor)
    assert load_model(gpu_ws, "layer_norm.fwd.device~l4", "champion").lanes is None   # no lane-bound op
    backward = load_model(gpu_ws, "fully_connected.bwd.device~l4", "champion")
    assert backward.bounds == {"M": data.params["M"].max(), "N": data.params["N"].max()}
    expected = sum(fresh.predict(gemm_shapes.orient(part, backward.bounds))
                   for part in gemm_shapes.shapes("fully_connected", "bwd", frame))
    np.testing.assert_allclose(backward.predict(frame), expected)
    inside = frame[(frame["N"] <= backward.bounds["M"])]      # no GEMM to turn: the model's own backward pricing
    assert 0 < len(inside) < len(frame)
    np.testing.assert_allclose(fresh.predict_pass(inside, "bwd"), backward.predict(inside))


def test_a_sheet_outside_its_sources_span_figure_by_figure():
    sources = [{"fp32_flops": 8e12, "mem_bw": 400e9, "sm_count": 40.0, "cores_per_sm": 64.0, "l2_bytes": 4 * 2 ** 20},
               {"fp32_flops": 16e12, "mem_bw": 1000e9, "sm_count": 80.0, "cores_per_sm": 64.0,
                "l2_bytes": math.nan}]
    inside = {"fp32_flops": 10e12, "mem_bw": 500e9, "sm_count": 80.0, "cores_per_sm": 64.0, "l2_bytes": 4 * 2 ** 20}
    assert cross_gpu.sheet_outside(inside, sources) == {}      # 20 FLOP/B within 16-20, every edge included
    beyond = {**inside, "mem_bw": 250e9, "sm_count": 132.0, "l2_bytes": math.nan, "clock_mhz": 9999.0}
    outside = cross_gpu.sheet_outside(beyond, sources)
    assert outside == {"mem_bw": [250e9, 400e9, 1000e9], "flop_per_byte": [40.0, 16.0, 20.0],
                       "sm_count": [132.0, 40.0, 80.0]}         # a missing L2 and the clock are not compared
    assert cross_gpu.describe_outside(outside) == ("bandwidth 250 GB/s (sources 400-1e+03), FP32 per byte 40 FLOP/B "
                                                   "(sources 16-20), SMs 132 (sources 40-80)")


def test_a_spec_only_target_keeps_each_held_out_gpus_ratio(gpu_ws):
    """Per held-out source GPU, its kernels' measured time summed over what the model trained without it predicted,
    stored with the forward model and seen by the backward GEMMs priced with it."""
    options = cross_gpu.CrossGpuOptions(target="l4", ops=["fully_connected"])
    with Store.open(gpu_ws) as store:
        cross_gpu.fit_for_target(store, gpu_ws, options)
        data = cross_gpu.load_data(store, "fully_connected", list(SOURCES))
    held: dict = {}
    cross_gpu.leave_one_gpu_out(data, 0, predictions=held)
    expected = {gpu: measured.sum() / predicted.sum() for gpu, (predicted, measured) in held.items()}
    forward = load_model(gpu_ws, "fully_connected.fwd.device~l4", "champion")
    backward = load_model(gpu_ws, "fully_connected.bwd.device~l4", "champion")
    assert sorted(forward.info["logo_ratio"]) == sorted(SOURCES)
    assert forward.info["logo_ratio"] == pytest.approx(expected)
    assert backward.base.info["logo_ratio"] == pytest.approx(expected)
    assert backward.base.info["sheet_outside"] == forward.info["sheet_outside"]
    assert max(abs(r - 1) for r in expected.values()) > 0.01      # the GPUs differ from what the others predict


def test_a_target_with_tables_is_tested_on_its_own_rows(gpu_ws):
    options = cross_gpu.CrossGpuOptions(target="v100", ops=["layer_norm"], sources=["p4", "t4"], logo=False)
    with Store.open(gpu_ws) as store:
        results, _ = cross_gpu.fit_for_target(store, gpu_ws, options)
    row = results.iloc[0]
    assert row["test"] == "own rows" and row["n_test"] == ROWS and row["n_train"] == 2 * ROWS
    assert math.isfinite(row["gmae"]) and row["champion"]


def test_cli_registers_versions_for_a_spec_only_gpu(gpu_ws):
    code, out, err = cli(gpu_ws.home, "fit", "cross-gpu", "--target", "l4", "--op", "bmm", "--op", "add",
                         "--no-progress", "--max-rows", "150")
    assert code == 0, err
    assert re.search(r"bmm\.fwd\.device~l4\s+1\s+cross_gpu\s+leave-one-G", out), out  # the table may cut the test
    assert re.search(r"bmm\.bwd\.device~l4\s+1\s+gemm_shapes", out)
    assert re.search(r"add\.fwd\.device~l4\s+1\s+cross_gpu", out)
    assert "3 model versions registered on l4, learned from p4, t4, v100" in out
    assert "pmdb: note: l4's sheet lies outside its sources' span: FP32 rate 31.3 TFLOP/s" in " ".join(err.split())
    assert re.search(r"measured over predicted kernel time on each source GPU left out: bmm \d\.\d\d-\d\.\d\d, add "
                     r"\d\.\d\d-\d\.\d\d; `pmdb predict --target-platform l4` prints the range", " ".join(out.split()))
    with Store.open(gpu_ws, read_only=True) as store:
        assert store.scalar("SELECT max(n_train) FROM model_versions WHERE name LIKE 'bmm.fwd%~l4'") == 450
        assert store.scalar("SELECT status FROM collection_runs WHERE kind = 'fit-cross-gpu'") == "completed"


def test_cli_says_the_lane_correction_and_leaves_it_out_when_asked(gpu_ws):
    args = ("fit", "cross-gpu", "--target", "l4", "--op", "fully_connected", "--no-logo", "--no-progress",
            "--max-rows", "60")
    code, _, err = cli(gpu_ws.home, *args)
    assert code == 0, err
    said = " ".join(err.split())
    assert "pmdb: note: l4's SMs have 128 FP32 lanes, its sources' 64: fully_connected priced x1.30" in said
    with_lanes = load_model(gpu_ws, "fully_connected.fwd.device~l4", "champion")
    code, _, err = cli(gpu_ws.home, *args, "--no-lane-correction", "--promote")
    assert code == 0, err
    assert "128 FP32 lanes" not in " ".join(err.split())
    without = load_model(gpu_ws, "fully_connected.fwd.device~l4", "champion")
    assert with_lanes.lanes == lane_attainment.load() and without.lanes is None
    rows = pd.DataFrame({"B": [1.0, 1.0], "M": [1024.0, 4096.0], "N": [1024.0, 4096.0], "K": [1024.0, 1024.0]})
    np.testing.assert_allclose(with_lanes.predict(rows), without.predict(rows) * with_lanes.lanes.time_factor)
    with Store.open(gpu_ws, read_only=True) as store:
        flags = store.query("SELECT CAST(args->>'lane_correction' AS VARCHAR) AS lanes FROM collection_runs "
                            "WHERE kind = 'fit-cross-gpu' ORDER BY started_at")["lanes"].tolist()
    assert flags == ["true", "false"]


@pytest.mark.parametrize("args, pattern", [
    (["--target", "h100"], r"unknown platform 'h100' \(known: .*l4.*; register one with `pmdb platform-specs FILE "
                           r"--name h100`\)"),
    (["--target", "nosheet"], r"platform 'nosheet' has no GPU spec sheet: register one with `pmdb platform-specs"),
    (["--target", "l4", "--source", "nosheet"], r"no spec sheet or no device timings for source GPU\(s\) nosheet"),
    (["--target", "l4", "--source", "l4"], r"cannot be one of its own sources"),
    (["--target", "l4", "--op", "conv2d"], r"too few source GPUs with tables of conv2d \(need 2; ops with enough: "
                                           r"add, bmm, fully_connected, layer_norm\)"),
    (["--target", "l4", "--source", "p4", "--op", "add"], r"too few source GPUs with tables of add"),
])
def test_cli_bad_input_is_one_line(gpu_template, shared_data, args, pattern):
    one_line_error(cli(gpu_template.home, "fit", "cross-gpu", *args, "--no-progress"), pattern)


def test_gemms_beyond_the_trained_rows_scale_by_waves(gpu_template, tmp_path):
    with Store.open(gpu_template, read_only=True) as store:
        data = cross_gpu.load_data(store, "fully_connected")
    model = cross_gpu.fit(data, seed=0)
    top = data.params["M"].max()
    assert model.row_limit == top
    sheet = gpu_specs.GpuSheet("Tesla V100-PCIE-32GB", 14.029e12, 900e9, 80, 64, 1370.0, 6 * 2 ** 20)
    bound = model.for_gpu(sheet, "v100")
    for n, k in ((1024.0, 1024.0), (4096.0, 1024.0), (768.0, 3072.0)):
        frame = pd.DataFrame({"B": 1.0, "M": [top, 2 * top, 4 * top, 2.5 * top], "N": n, "K": k})
        times = bound.predict(frame)
        assert times[1] / times[0] == pytest.approx(2.0) and times[2] / times[0] == pytest.approx(4.0)
        waves = cross_gpu.work_frame("fully_connected", "fwd", "float32", frame, V100.loc[[0] * 4])["waves"]
        # 2.5x: three chunks of 5/6 of the rows, each priced as such a GEMM; the whole scales with the waves (not
        # flat as trees alone), within what the utilisation of a 5/6 chunk differs by from a full one
        chunk, count = gemm_shapes.chunk_rows(frame.iloc[[3]], top)
        assert count[0] == 3 and times[3] == pytest.approx(3 * bound.predict(chunk)[0])
        assert 0.7 <= (times[3] / times[0]) / (waves[3] / waves[0]) <= 1.3
        batched = bound.predict(pd.DataFrame({"B": [4.0], "M": [top], "N": [n], "K": [k]}))
        assert batched[0] == pytest.approx(times[2])               # B·M rows: the same GEMM
    loaded = cross_gpu.CrossGpuModel.from_saved(bound.config(), bound.save(tmp_path / "m"))
    assert loaded.row_limit == top
    old = bound.config() | {"row_limit": None}                     # a version saved before: trees as they are
    assert cross_gpu.CrossGpuModel.from_saved(old, tmp_path / "m").row_limit is None


def test_a_spec_only_gpu_without_models_is_pointed_at_fit_cross_gpu(gpu_template):
    """The note of a prediction on a GPU without kernel models names the command that gives it some: cross-GPU models
    for a sheet-only GPU (with how many GPUs they would learn from), `pmdb fit --platform` where the platform has
    rows of its own."""
    from simulator.session import fit_hint

    with Store.open(gpu_template, read_only=True) as store:
        assert fit_hint(store, "l4") == ("it has a spec sheet and no measurements: fit cross-GPU models from the 3 "
                                         "other GPUs with kernel timings with `pmdb fit cross-gpu --target l4`")
        assert fit_hint(store, "nosheet") == "fit models with `pmdb fit --platform nosheet`"
        assert fit_hint(store, "v100") == "fit models with `pmdb fit --platform v100`"


def test_a_second_fit_keeps_the_champions_unless_promoted(gpu_ws):
    """Fitting a spec-only target again registers new versions beside the champions (their leave-one-GPU-out metrics
    come from other sources, so they are not ranked), says so in one note, and --promote moves the champions."""
    def champion() -> int:
        with Store.open(gpu_ws, read_only=True) as store:
            return store.scalar("SELECT version FROM model_aliases WHERE name = 'add.fwd.device~l4' "
                                "AND alias = 'champion'")

    args = ("fit", "cross-gpu", "--target", "l4", "--op", "add", "--no-logo", "--no-progress", "--max-rows", "60")
    assert cli(gpu_ws.home, *args)[0] == 0 and champion() == 1
    code, out, err = cli(gpu_ws.home, *args, "--source", "p4", "--source", "t4")
    assert code == 0, err
    assert champion() == 1
    said = " ".join(err.split())
    assert said.count("registered beside the champion") == 1
    assert ("1 version(s) registered beside the champion their name already has (add.fwd.device~l4), which "
            "predictions keep using: `pmdb fit cross-gpu --target l4 --promote`") in said
    code, out, err = cli(gpu_ws.home, *args, "--promote")
    assert code == 0, err
    assert champion() == 3 and "registered beside" not in err
