"""Planner calibration: the fitted terms, the split by configuration, multi-node placement, the registry round trip."""
import dataclasses
import re

import numpy as np
import pandas as pd
import pytest

from pmdb.cli.main import main
from pmdb.errors import PmdbError
from planner import fitting
from planner.fitting import PARAMS, PlannerCalibration, split_runs
from planner.validate import megatron_placement, read_runs, validate

SAMPLE = "megatron_runs/a100_single_node_sample.csv"


def _runs(**overrides) -> pd.DataFrame:
    base = {"gpus": 2, "global_batch": 8, "micro_batch": 2, "hidden": 1024, "heads": 16, "layers": 12,
            "seq_len": 1024, "tp": 2, "dp": 1, "pp": 1, "measured_s": 0.1}
    base.update(overrides)
    return pd.DataFrame({k: [v] for k, v in base.items()})


def test_parameter_count_is_stated_and_small():
    assert len(PARAMS) == 13
    assert all(lo <= init <= hi for init, lo, hi, _ in PARAMS.values())
    with pytest.raises(PmdbError, match="unknown planner calibration parameter 'gemm_speed'"):
        PlannerCalibration({"gemm_speed": 1.0})


def test_split_keeps_configurations_together_and_is_seeded():
    runs = pd.concat([_runs(micro_batch=mb, global_batch=8 * mb) for mb in (1, 2, 4, 8)] * 2 +
                     [_runs(layers=24, micro_batch=1)], ignore_index=True)
    train, test = split_runs(runs, seed=3, test_fraction=0.4)
    assert (train ^ test).all() and train.any() and test.any()
    keys = runs[list(fitting.CONFIG_COLUMNS)].astype(str).agg("/".join, axis=1)
    assert not set(keys[train]) & set(keys[test])          # a duplicated configuration never straddles the split
    again = split_runs(runs, seed=3, test_fraction=0.4)
    assert (again[0] == train).all()
    assert any((split_runs(runs, seed=s, test_fraction=0.4)[1] != test).any() for s in range(4, 10))
    with pytest.raises(PmdbError, match="at least 2"):
        split_runs(runs.head(1), seed=0)


def test_microbatch_fixed_cost_counts_once_per_micro_batch(a100, megatron_fw):
    runs = _runs(global_batch=8, micro_batch=2)        # pp 1, dp 1: 4 micro-batches
    plain = validate(runs, a100, megatron_fw, vocab=50257, fitted=PlannerCalibration({}))
    slow = validate(runs, a100, megatron_fw, vocab=50257, fitted=PlannerCalibration({"microbatch_fixed_us": 1e6}))
    # a host cost of 1 s per micro-batch dominates the device time: 4 micro-batches × 1 s, plus the iteration's
    # data-parallel, embedding-sync and optimizer parts, which the host does not hide
    t, p = slow.rows["predicted_s"][0], plain.rows["predicted_s"][0]
    assert 4.0 < t < 4.0 + p
    more_layers = validate(_runs(global_batch=8, micro_batch=2, layers=24), a100, megatron_fw, vocab=50257,
                           fitted=PlannerCalibration({"layer_fixed_us": 1e5}))
    assert more_layers.rows["predicted_s"][0] > 4 * 24 * 0.1


def test_gemm_latency_and_wave_weight_change_gemm_time(a100, megatron_fw):
    runs = _runs()
    base = validate(runs, a100, megatron_fw, vocab=50257, fitted=PlannerCalibration({"gemm_latency_us": 0.0,
                                                                                      "wave_weight": 1.0}))
    exact = validate(runs, a100, megatron_fw, vocab=50257, fitted=PlannerCalibration({"gemm_latency_us": 0.0,
                                                                                       "wave_weight": 0.0}))
    slow = validate(runs, a100, megatron_fw, vocab=50257, fitted=PlannerCalibration({"gemm_latency_us": 100.0,
                                                                                      "wave_weight": 1.0}))
    compute = [r.rows["breakdown"][0]["compute"] for r in (base, exact, slow)]
    assert compute[1] <= compute[0] < compute[2]


@pytest.mark.parametrize("tp, dp, pp, domain, expected", [
    (2, 8, 1, 8, (2, 4, 1)),     # tensor inside the node, data parallel over 4 per node and 2 nodes
    (8, 2, 4, 8, (8, 1, 1)),     # a full node per tensor group: data and pipeline cross nodes
    (4, 1, 4, 8, (4, 1, 2)),     # two pipeline stages per node
    (2, 2, 2, 16, (2, 2, 2)),    # everything inside one domain
])
def test_megatron_placement_by_hand(tp, dp, pp, domain, expected):
    got = tuple(int(x[0]) for x in megatron_placement(np.array([tp]), np.array([dp]), np.array([pp]), domain))
    assert got == expected


@pytest.mark.usefixtures("fit_workspace")   # the workspace with an empty MLflow store
def test_fit_registers_a_version_never_fitted_on_its_held_out_runs(store, workspace, shared_data, a100, megatron_fw,
                                                                    capsys):
    runs = read_runs(shared_data / SAMPLE).iloc[:120].reset_index(drop=True)
    result = fitting.fit(runs, a100, megatron_fw, vocab=50257, seed=5, max_evaluations=40)
    assert result.train.sum() + result.test.sum() == len(runs) and not (result.train & result.test).any()
    # the fitted parameters do not depend on the held-out rows: changing their measurements changes nothing
    poisoned = runs.copy()
    poisoned.loc[result.test, "measured_s"] *= 3
    again = fitting.fit(poisoned, a100, megatron_fw, vocab=50257, seed=5, max_evaluations=40)
    assert again.calibration.params == pytest.approx(result.calibration.params)
    assert again.test_summary["mape"] > result.test_summary["mape"]
    uncalibrated = validate(runs[result.test], a100, megatron_fw, vocab=50257).summary
    assert result.test_summary["mape"] < uncalibrated["mape"]

    model = fitting.PlannerCalibrationModel(result.calibration, a100.as_dict(), megatron_fw.name, 50257, "full")
    name, version, champion = fitting.register(store, result, model, fit_run_id=None, source="sample")
    assert (name, version, champion) == ("pmdb.a100.planner", 1, 1)
    row = store.query("SELECT family, test_mape, n_train, n_test FROM model_versions WHERE name = ?", [name])
    assert row["family"][0] == "planner_calibration" and row["n_test"][0] == result.test.sum()
    assert row["test_mape"][0] == pytest.approx(result.test_summary["mape"])
    aliases = dict(store.query("SELECT alias, version FROM model_aliases WHERE name = ?", [name]).values.tolist())
    assert aliases == {"latest": 1, "champion": 1}
    loaded = fitting.load_registered(store, "a100", "champion")
    assert loaded.calibration.params == pytest.approx(result.calibration.params)
    assert loaded.calibration.label == "pmdb.a100.planner v1"
    assert np.allclose(loaded.predict(runs) * 1e-6, result.predicted_s)
    store.close()

    home = str(workspace.home)
    csv = shared_data / SAMPLE
    assert main(["--home", home, "plan", "validate", str(csv), "--calibration", "1", "--worst", "1"]) == 0
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "calibration: pmdb.a100.planner v1" in out
    mape = float(re.search(r"MAPE ([\d.]+)%", out).group(1))
    assert mape < 16.1
    for args, pattern in [(["--calibration", "7"], "no registered model version pmdb.a100.planner 7"),
                          (["--calibration", "best"], "bad calibration version 'best'"),
                          (["--calibration", "1", "--system", "h100"], "no planner calibration registered for "
                                                                        "system 'h100'")]:
        code = main(["--home", home, "plan", "validate", str(csv), *args])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(err) == 1 and re.search(pattern, err[0]), err


def test_calibrate_refuses_bad_input(tmp_path, capsys):
    for args, pattern in [(["--runs", str(tmp_path / "none.csv")], "no such file"),
                          (["--runs", "x.csv", "--system", "platform:foo"], "calibrations are fitted for a shipped"),
                          (["--runs", "x.csv", "--recompute", "some"], "bad --recompute 'some'")]:
        code = main(["--home", str(tmp_path / "ws"), "plan", "calibrate", *args])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(err) == 1 and re.search(pattern, err[0]), err
