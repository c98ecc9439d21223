"""Calibrated mode with the platform's registered champion models: tiny real fits (a roofline GEMM model and a
sigmoid all_reduce model) in a real store and a real MLflow registry, loaded back through fitters.load."""
from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pytest

from fitters.collective import CollectiveParams, bus_factor, curve
from fitters.fit import FitOptions, fit_models
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.errors import PmdbError
from pmdb.store import Store
from planner.registered import gemm_ref, registered_models
from planner.study import calibration_for

BOX = "fit-box"
T0_US, FLOPS, BW = 8.0, 4e10, 8e9          # the synthetic GEMM law: T0 + max(flops / FLOPS, bytes / BW)
MEASURED = 2.0 ** np.arange(2, 25)          # all_reduce sizes measured (bytes): 4 B .. 16 MiB
LAW = CollectiveParams.continuous(m1=2.0 ** 14, m2=2.0 ** 23, t_s=60.0, bw_max=1.5, k=0.9, x0=18.5,
                                  mul=bus_factor("all_reduce", 2))


def _gemm_us(m: float, n: float, k: float) -> float:
    return T0_US + max(2 * m * n * k / FLOPS, 4 * (m * k + k * n + m * n) / BW) * 1e6


def _all_reduce_us(nbytes: np.ndarray) -> np.ndarray:
    return curve(LAW, bus_factor("all_reduce", 2), nbytes)


def _measure(store: Store) -> None:
    """Synthetic but real rows: peaks, 40 fully_connected configurations (cold), an all_reduce curve (ws 2)."""
    platforms.ensure_named(store, BOX, device_kind="cuda")
    rng = np.random.default_rng(7)
    configs = [{"B": 1, "M": int(rng.choice([16, 64, 256, 1024])), "N": int(n), "K": int(rng.choice([64, 256, 1024]))}
               for n in rng.choice([32, 128, 512, 2048], 40)]
    configs = list({json.dumps(c, sort_keys=True): c for c in configs}.values())
    with store.run("ops", BOX) as run:
        store.insert("platform_peaks", [
            {"platform": BOX, "run_id": run.run_id, "metric": "gemm_flops", "dtype": d, "value": FLOPS}
            for d in ("float32", "float16")] + [
            {"platform": BOX, "run_id": run.run_id, "metric": "mem_bw", "dtype": "float32", "value": BW}])
        store.insert("op_measurements", [
            {"run_id": run.run_id, "platform": BOX, "op": "fully_connected", "pass": "fwd", "implementation": "torch",
             "dtype": "float32", "device": "cpu", "cache_state": "cold", "params": c,
             "config_key": hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest(),
             "median_us": _gemm_us(c["M"], c["N"], c["K"]), "threads": 1} for c in configs])
    with store.run("comms", BOX) as run:
        store.insert("collective_measurements", [
            {"run_id": run.run_id, "platform": BOX, "collective": "all_reduce", "backend": "gloo", "world_size": 2,
             "split_kind": "equal", "rank": None, "total_bytes": int(2 * s), "max_rank_bytes": int(s),
             "lat_p50_us": float(t), "source": "measured"} for s, t in zip(MEASURED, _all_reduce_us(MEASURED))])


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, mlflow_template):
    """A workspace whose platform has a registered champion GEMM (roofline) and all_reduce (sigmoid) model."""
    from harness import copy_workspace
    from pmdb.config import Workspace

    # a new workspace with an empty MLflow sqlite store, made before any use (a copy: no second creation)
    ws = Workspace(copy_workspace(mlflow_template.home, tmp_path_factory.mktemp("registered") / "ws"))
    with Store.open(ws) as store:
        _measure(store)
        for family, op in (("roofline", "fully_connected"), ("sigmoid", "all_reduce")):
            fit_models(store, ws, BOX, FitOptions(ops=[op], family=family, budget_minutes=0.1, progress=False))
    return ws


def test_champions_are_loaded_and_named_with_their_versions(fitted):
    with Store.open(fitted) as store:
        models = registered_models(store, BOX)
        champions = store.query("SELECT name, version FROM model_aliases WHERE alias = 'champion' ORDER BY name")
    assert models is not None
    gemm_name = f"fully_connected.fwd.cold~{BOX}"
    assert set(champions["name"]) == {gemm_name, f"all_reduce.ws2~{BOX}"}
    for name, version in zip(champions["name"], champions["version"]):
        assert f"{name} v{version}" in models.label
    assert set(models.collectives) == {("all_reduce", 2)}
    M, N, K = np.array([512.0, 64.0]), np.array([1024.0, 32.0]), np.array([256.0, 64.0])
    got_us = models.gemm_time(M, N, K, np.ones(2)) * 1e6
    want_us = np.array([_gemm_us(*x) for x in zip(M, N, K)])
    assert got_us == pytest.approx(want_us, rel=0.15)
    sizes = np.array([2.0 ** 10, 2.0 ** 18])
    assert models.collective_time("all_reduce", sizes, np.array([2, 2])) * 1e6 == pytest.approx(
        _all_reduce_us(sizes), rel=0.2)
    assert np.isnan(models.collective_time("all_reduce", sizes, np.array([4, 4]))).all()   # no ws4 model


def test_calibrated_mode_uses_registered_models_after_measured_curves(fitted):
    with Store.open(fitted) as store:
        plain = calibration_for(store, BOX, [])
        calibrated = calibration_for(store, BOX, [], registry_alias="champion")
    assert "registered" not in plain.label and "registered champion models of fit-box" in calibrated.label
    M, N, K, one = (np.array([256.0]),) * 3 + (np.array([1.0]),)
    assert np.isnan(plain.gemm_time(M, N, K, one)).all()            # today: no GEMM without --model-dir
    assert calibrated.gemm_time(M, N, K, one)[0] * 1e6 == pytest.approx(_gemm_us(256, 256, 256), rel=0.15)
    inside, above = np.array([2.0 ** 12]), np.array([2.0 ** 27])     # measured up to 16 MiB only
    two = np.array([2])
    measured_us = _all_reduce_us(inside)[0]
    assert plain.collective_time("all_reduce", inside, two)[0] * 1e6 == pytest.approx(measured_us)
    assert calibrated.collective_time("all_reduce", inside, two)[0] * 1e6 == pytest.approx(measured_us)  # curve first
    assert np.isnan(plain.collective_time("all_reduce", above, two)).all()
    assert calibrated.collective_time("all_reduce", above, two)[0] * 1e6 == pytest.approx(
        _all_reduce_us(above)[0], rel=0.3)                              # the fitted model extrapolates


def test_a_platform_without_registered_models_falls_back(fitted):
    with Store.open(fitted) as store:
        platforms.ensure_named(store, "bare-box", device_kind="cpu")
        assert registered_models(store, "bare-box") is None
        assert registered_models(store, BOX, alias="no-such-alias") is None
        with pytest.raises(PmdbError, match="no measured collective curves, no champion models registered"):
            calibration_for(store, "bare-box", [], registry_alias="champion")


def test_gemm_choice_prefers_device_then_cold_and_the_torch_forward():
    from fitters.load import ModelRef

    def ref(name, pass_="fwd", cache="warm", impl="torch", op="fully_connected"):
        return ModelRef(name, 1, op, pass_, "mlp", cache, impl, None)

    refs = [ref("a-warm"), ref("b-cold", cache="cold"), ref("c-bwd", pass_="bwd", cache="device"),
            ref("d-other", impl="onednn", cache="device"), ref("e-bmm", op="bmm", cache="device")]
    assert gemm_ref(refs).name == "b-cold"
    assert gemm_ref(refs + [ref("f-device", cache="device")]).name == "f-device"
    assert gemm_ref(refs[2:]) is None


def test_plan_cli_says_which_versions_timed_what(fitted, capsys):
    args = ["--home", str(fitted.home), "plan", "--model", "gpt2-345m", "--gpus", "2", "--global-batch", "8",
            "--system", "platform:fit-box", "--framework", "megatron-deepspeed", "--top", "2", "--quiet"]
    capsys.readouterr()
    assert main([*args, "--calibrated"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"timed by: .*gemm: calibrated \d+", out)
    assert re.search(rf"registered champion models of {BOX}: fully_connected\.fwd\.cold~{BOX} v\d+", out)
