"""Calibrated mode: systems from a platform's measured peaks; measured and fitted models in place of formulas."""
import re

import numpy as np
import pytest

from pmdb.cli.main import main
from pmdb.errors import PmdbError
from pmdb.store import Store
from planner.calibration import Calibration, Calibrations, FittedModels, MeasuredCollectives, platform_system
from planner.candidates import Candidates
from planner.evaluate import evaluate
from planner.system import load

SIZES = 2.0 ** np.arange(20, 31)          # 1 MiB .. 1 GiB


def _measured_us(nbytes):
    """A made-up but smooth all-reduce curve: 40 µs plus 2·(n−1)/n·bytes at 150 GB/s for n = 4."""
    return 40 + 1.5 * nbytes / 150e9 * 1e6


def _platform(store, name="gpu-box", failed_peak=None):
    store.insert_one("platforms", {"name": name, "device_kind": "cuda", "semantics": "async_device",
                                   "gpu_count": 4, "gpu_memory_bytes": 40_000_000_000, "is_imported": True})
    with store.run("peaks", name) as run:
        store.insert("platform_peaks", [
            {"platform": name, "run_id": run.run_id, "metric": "gemm_flops", "dtype": "float16", "value": 200e12},
            {"platform": name, "run_id": run.run_id, "metric": "mem_bw", "dtype": None, "value": 1.5e12}])
        store.insert("collective_measurements", [
            {"run_id": run.run_id, "platform": name, "collective": "all_reduce", "backend": "nccl", "world_size": 4,
             "split_kind": "equal", "total_bytes": int(4 * s), "max_rank_bytes": int(s), "lat_p50_us": _measured_us(s),
             "source": "nccl-tests"} for s in SIZES])
    if failed_peak is not None:
        with pytest.raises(RuntimeError):
            with store.run("peaks", name) as run:
                store.insert_one("platform_peaks", {"platform": name, "run_id": run.run_id, "metric": "gemm_flops",
                                                    "dtype": "float16", "value": failed_peak})
                raise RuntimeError("the measurement broke")


def test_platform_system_uses_measured_peaks(store):
    _platform(store, failed_peak=900e12)
    system = platform_system(store, "gpu-box", load("h100"))
    assert system.matrix_flops("fp16") == 200e12           # the failed run's 900 TFLOP/s never counts
    assert system.hbm_bw == 1.5e12 and system.hbm_gb == 40 and system.nvlink_domain == 4
    assert system.efficiency["matrix"] == 1.0 and system.efficiency["nvlink"] == load("h100").efficiency["nvlink"]
    assert system.provenance["matrix_tflops"] == "measured (gpu-box)"
    assert system.provenance["nvlink_gbps"] == "base system h100"
    with pytest.raises(PmdbError, match="no matrix_tflops for bf16"):
        system.matrix_flops("bf16")


def test_platform_without_peaks_is_refused(store):
    store.insert_one("platforms", {"name": "bare", "device_kind": "cpu", "semantics": "sync_host",
                                   "is_imported": True})
    with pytest.raises(PmdbError, match="no measured 'gemm_flops' peak"):
        platform_system(store, "bare", load("h100"))


def test_measured_collectives_interpolate_inside_their_range(store):
    _platform(store)
    curves = MeasuredCollectives(store, "gpu-box")
    assert isinstance(curves, MeasuredCollectives) and curves
    got = curves.collective_time("all_reduce", np.array([SIZES[3], 1.5 * 2.0 ** 24, 1e3, 4e9, SIZES[3]]),
                                 np.array([4, 4, 4, 4, 8]))
    assert got[0] == pytest.approx(_measured_us(SIZES[3]) * 1e-6)
    assert _measured_us(2.0 ** 24) * 1e-6 < got[1] < _measured_us(2.0 ** 25) * 1e-6
    assert np.isnan(got[2:]).all()                # below, above the measured sizes; unmeasured world size


def test_calibrated_evaluation_says_what_timed_what(store, tiny, megatron_fw):
    _platform(store)
    system = platform_system(store, "gpu-box", load("a100"))
    cands = Candidates.from_columns("1d", t1=[4], pp=[1], dp=[1], mb=[64], nmb=[1])
    plain = evaluate(tiny, system, cands, megatron_fw)
    calibrated = evaluate(tiny, system, cands, megatron_fw, MeasuredCollectives(store, "gpu-box"))
    assert calibrated.usage["all_reduce"]["calibrated"] > 0 and plain.usage["all_reduce"]["calibrated"] == 0
    assert calibrated.usage["gemm"] == {"roofline": plain.usage["gemm"]["roofline"]}
    assert calibrated.parts["tp_comm"][0] > plain.parts["tp_comm"][0]      # measured 40 µs latency > ring formula
    assert calibrated.parts["compute"][0] == plain.parts["compute"][0]


def test_fitted_models_from_the_fitters(tmp_path, tiny, megatron_fw):
    from fitters.collective import fit
    from fitters.model import load_dir
    from fitters.roofline import uncalibrated

    gemm = uncalibrated("fully_connected", "fwd", "float16", {"gemm_flops": 150e12, "mem_bw": 1.2e12})
    collective = fit("all_reduce", 4, SIZES, _measured_us(SIZES))
    models = FittedModels(load_dir(gemm.save(tmp_path / "gemm")),
                          {("all_reduce", 4): load_dir(collective.save(tmp_path / "ar4"))})
    assert isinstance(models, Calibration) and set(models.collectives) == {("all_reduce", 4)}
    M, N, K = np.array([1024.0]), np.array([4096.0]), np.array([1024.0])
    assert models.gemm_time(M, N, K, np.array([1.0]))[0] == pytest.approx(2 * 1024 * 4096 * 1024 / 150e12, rel=1e-6)
    assert models.collective_time("all_reduce", SIZES[5:6], np.array([4]))[0] == pytest.approx(
        _measured_us(SIZES[5]) * 1e-6, rel=0.1)
    cands = Candidates.from_columns("1d", t1=[4], pp=[1], dp=[1], mb=[8], nmb=[1])
    result = evaluate(tiny, load("a100"), cands, megatron_fw, Calibrations(models))
    assert result.usage["gemm"].get("roofline", 0) == 0 and result.usage["gemm"]["calibrated"] > 0


def test_calibrated_cli(workspace, capsys):
    with Store.open(workspace) as store:
        _platform(store)
    capsys.readouterr()
    args = ["--home", str(workspace.home), "plan", "--model", "gpt2-345m", "--gpus", "4", "--global-batch", "8",
            "--system", "platform:gpu-box", "--framework", "megatron-deepspeed", "--top", "2", "--quiet"]
    assert main([*args, "--calibrated"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"timed by: .*all_reduce: calibrated \d+", out) and "measured collectives of gpu-box" in out
    on_a100 = [a if a != "platform:gpu-box" else "a100" for a in args]
    assert main([*on_a100, "--calibrated"]) == 2
    assert "needs --system platform:NAME" in capsys.readouterr().err


def test_a_spec_sheet_gpu_without_measured_peaks_uses_its_sheet(store, tmp_path):
    """A GPU registered from its spec sheet (`pmdb platform-specs`) has nominal peaks for the planner."""
    from collectors import gpu_specs

    sheet = tmp_path / "gpu.json"
    sheet.write_text('{"Device": "Test GPU", "SingleFLOPs": 15000, "Mem_Bw": 900, "Num_Sm": 80, "Dev_Mem": 32}')
    name = gpu_specs.register(store, gpu_specs.read_sheet(sheet)[0], "sheet-gpu")
    system = platform_system(store, name, load("h100"))
    assert system.matrix_tflops == {"fp32": pytest.approx(15.0)} and system.hbm_gbps == pytest.approx(900.0)
    assert system.provenance["hbm_gbps"] == "measured or spec sheet (sheet-gpu)"
