"""The replicate noise floor beside a fit's test error: exact from the stored statistics of known repetitions, and
reported (fit results, MLflow) for a kernel fit's test rows."""
from __future__ import annotations

import mlflow
import numpy as np
import pytest

from collectors.ops.timer import Timing
from fitters.evaluate import replicate_gmae
from fitters.fit import FitOptions, fit_models
from pmdb import metrics
from pmdb.store import Store

PLATFORM = "synthetic-cpu"


def _insert(store: Store, samples: list[list[float]]) -> list[int]:
    """One completed ops run whose rows hold the statistics of the given repetitions (µs), as the sweep stores them."""
    from pmdb import platform as platforms

    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    ids = []
    with store.run("ops", PLATFORM, {}) as run:
        for i, reps in enumerate(samples):
            t = Timing.from_samples(reps, 1)
            ids.append(store.insert_one("op_measurements", {
                "run_id": run.run_id, "platform": PLATFORM, "op": "relu", "pass": "fwd", "implementation": "torch",
                "dtype": "float32", "device": "cpu", "cache_state": "cold", "params": {"M": 8 * (i + 1)},
                "config_key": f"k{i}", "median_us": t.median_us, "mean_us": t.mean_us, "std_us": t.std_us,
                "min_us": t.min_us, "repetitions": t.repetitions, "threads": 1}, returning="measurement_id"))
    return ids


def test_noise_floor_is_exact_rms_per_row_and_bounds_the_repetition_gmae(store):
    rng = np.random.default_rng(0)
    samples = [list(100.0 * (i + 1) * np.exp(rng.normal(0, 0.05, 7))) for i in range(20)]
    ids = _insert(store, samples)
    rms = [np.sqrt(np.mean((np.array(s) / np.median(s) - 1) ** 2)) for s in samples]
    expected = np.exp(np.mean(np.log(np.array(rms) + metrics.GMAE_EPSILON))) - metrics.GMAE_EPSILON
    assert replicate_gmae(store, ids) == pytest.approx(expected, rel=1e-9)
    each = metrics.gmae(np.concatenate(samples), np.concatenate([[np.median(s)] * len(s) for s in samples]))
    assert each <= replicate_gmae(store, ids) < 0.2          # at most the rows' spread, never below the exact GMAE
    assert np.isnan(replicate_gmae(store, []))


def test_kernel_fit_reports_the_noise_floor_of_its_test_rows(fit_workspace, synthetic):
    with Store.open(fit_workspace) as store:
        configs = synthetic.gemm_configs(40)
        rng = np.random.default_rng(1)
        samples = [list(synthetic.gemm_law(c) * np.exp(rng.normal(0, 0.04, 5))) for c in configs]
        from pmdb import platform as platforms

        platforms.ensure_named(store, PLATFORM, device_kind="cpu")
        with store.run("ops", PLATFORM, {}) as run:
            for i, (cfg, reps) in enumerate(zip(configs, samples)):
                t = Timing.from_samples(reps, 1)
                store.insert_one("op_measurements", {
                    "run_id": run.run_id, "platform": PLATFORM, "op": "fully_connected", "pass": "fwd",
                    "implementation": "torch", "dtype": "float32", "device": "cpu", "cache_state": "cold",
                    "params": cfg, "config_key": f"fc{i}", "median_us": t.median_us, "mean_us": t.mean_us,
                    "std_us": t.std_us, "min_us": t.min_us, "repetitions": t.repetitions, "threads": 1})
        synthetic.insert_peaks(store)
        results, _ = fit_models(store, fit_workspace, PLATFORM, FitOptions(family="roofline", progress=False))
        row = results.iloc[0]
        assert 0.005 < row["replicate_gmae"] < 0.1                   # ~4% repetition noise
        run_id = store.scalar("SELECT mlflow_run_id FROM model_versions WHERE name = ?", [row["name"]])
    logged = mlflow.MlflowClient(fit_workspace.mlflow_uri).get_run(run_id).data.metrics
    assert logged["test_replicate_gmae_pct"] == pytest.approx(100 * row["replicate_gmae"])  # MLflow: percent
