"""A registry people browse: readable names (``<what>~<platform>``), a one-line description per version, tags without
empty values, test metrics in percent, each fit's runs nested under one parent run, the Default experiment's
artifacts inside the workspace; a store whose models carry legacy names (``pmdb.<platform>.<what>``) keeps them, and
either form finds them. Overhead fits and (with --log-mlflow) predictions are MLflow runs too, and predict imports
no MLflow without it. Real store, real MLflow sqlite store, real CLI."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from mlflow import MlflowClient

from fitters import registry_mirror
from fitters.fit import FitOptions, fit_models
from fitters.load import select_models
from fitters.model import MODEL_FILE
from fitters.registry import (Registry, collective_model_name, kernel_model_name, known_name, legacy_name,
                              promote)
from pmdb.store import Store

from .conftest import cli

PLATFORM = "synthetic-cpu"
FC = "fully_connected.fwd.cold~synthetic-cpu"
LEGACY_FC = "pmdb.synthetic-cpu.fully_connected.fwd.cold"


def _fit_roofline(ws, synthetic) -> tuple[str, object]:
    """One roofline fit of synthetic gemm rows (fast); (the store's fit run id, the results)."""
    with Store.open(ws) as store:
        if not store.scalar("SELECT count(*) FROM op_measurements"):
            configs = synthetic.gemm_configs(30)
            synthetic.insert_ops(store, "fully_connected", configs,
                                 list(synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.05, 1)))
            synthetic.insert_peaks(store)
        results, _ = fit_models(store, ws, PLATFORM, FitOptions(ops=["fully_connected"], family="roofline",
                                                                progress=False))
        run_id = store.scalar("SELECT run_id FROM collection_runs WHERE kind = 'fit' ORDER BY started_at DESC "
                              "LIMIT 1")
    return run_id, results


def test_names_put_the_platform_last():
    assert kernel_model_name("cpu-box", "relu", "fwd", "torch", "float32", "cold") == "relu.fwd.cold~cpu-box"
    assert kernel_model_name("l4", "embedding_lookup", "fwd", "fbgemm_tbe", "float16", "device") == \
        "embedding_lookup.fwd.fbgemm_tbe.float16.device~l4"
    assert collective_model_name("cpu-box", "all_reduce", 2) == "all_reduce.ws2~cpu-box"
    assert legacy_name("all_reduce.ws2~cpu-box", "cpu-box") == "pmdb.cpu-box.all_reduce.ws2"
    assert legacy_name("all_reduce.ws2~cpu-box", "other") is None


def test_a_fit_is_readable_in_mlflow(fit_workspace, synthetic):
    ws = fit_workspace
    run_id, results = _fit_roofline(ws, synthetic)
    assert results["name"].tolist() == [FC]
    client = MlflowClient(ws.mlflow_uri)
    version = client.get_model_version(FC, "1")
    with Store.open(ws, read_only=True) as store:
        gmae = store.scalar("SELECT test_gmae FROM model_versions WHERE name = ?", [FC])   # a fraction
        n_test, n_train = store.query("SELECT n_test, n_train FROM model_versions WHERE name = ?", [FC]).iloc[0]
    assert 0 < gmae < 1
    assert version.description.startswith(f"roofline, test GMAE {100 * gmae:.1f}% (n={n_test}), ")
    assert f"train n={n_train}, platform {PLATFORM}, fitted 20" in version.description
    assert version.tags["family"] == "roofline" and version.tags["pmdb.fit_run"] == run_id
    assert "world_size" not in version.tags and all(value != "" for value in version.tags.values())
    assert client.get_registered_model(FC).tags == {"platform": PLATFORM}
    run = client.get_run(version.run_id)
    assert run.data.metrics["test_gmae_pct"] == pytest.approx(100 * gmae)      # percent, as the CLI prints
    assert not any(key in run.data.metrics for key in ("test_gmae", "test_n"))
    logged = client.get_logged_model(version.source.removeprefix("models:/"))   # carries the run's params, metrics
    assert {m.key: m.value for m in logged.metrics} == run.data.metrics and logged.params == run.data.params
    assert {a.path for a in client.list_artifacts(run.info.run_id)} >= {"feature_spec.json", "split.json"}
    parent = client.get_run(run.data.tags["mlflow.parentRunId"])
    assert parent.info.run_name == f"pmdb fit --platform {PLATFORM} --op fully_connected --family roofline " \
                                   f"(run {run_id})"
    assert parent.data.tags["pmdb.fit_run"] == run_id and parent.data.metrics["versions"] == 1
    shutil.rmtree(ws.artifacts / "model_cache", ignore_errors=True)   # fetched through models:/NAME/VERSION
    assert (Registry(ws).download(FC, "champion") / MODEL_FILE).is_file()
    default = client.get_experiment("0")
    assert default.artifact_location == (ws.mlflow_artifacts / "Default").resolve().as_uri()


def test_a_legacy_name_keeps_its_versions_and_either_form_finds_them(fit_workspace, synthetic):
    """A store from before readable names: its model registered (MLflow and mirror) as pmdb.<platform>.<what>."""
    ws = fit_workspace
    _fit_roofline(ws, synthetic)
    client = MlflowClient(ws.mlflow_uri)
    client.rename_registered_model(FC, LEGACY_FC)
    with Store.open(ws) as store:
        for table in ("model_versions", "model_aliases"):
            store.conn.execute(f"UPDATE {table} SET name = ? WHERE name = ?", [LEGACY_FC, FC])
    _, results = _fit_roofline(ws, synthetic)                  # a refit: version 2 of the legacy name
    assert results["name"].tolist() == [LEGACY_FC] and results["version"].tolist() == [2]
    assert [m.name for m in client.search_registered_models()] == [LEGACY_FC]
    with Store.open(ws) as store:
        assert known_name(store, FC) == LEGACY_FC and known_name(store, LEGACY_FC) == LEGACY_FC
        for spec_name in (FC, LEGACY_FC):                       # a user's name:version in either form
            [ref] = select_models(store, PLATFORM, versions={spec_name: 1})
            assert (ref.name, ref.version) == (LEGACY_FC, 1)
        other = 3 - int(client.get_registered_model(LEGACY_FC).aliases["champion"])
        promote(store, Registry(ws, store), FC, other)          # `pmdb models promote` with the readable name
        assert int(client.get_registered_model(LEGACY_FC).aliases["champion"]) == other
        cmp = registry_mirror.compare(store, ws)                # pmdb doctor still sees every version
    assert (cmp.mirrored, cmp.held, cmp.missing, cmp.unmirrored, cmp.champions) == (2, 2, [], [], [])


def _trace_workspace(fit_workspace, shared_data):
    trace = shared_data / "traces" / "gpu" / "hta_simple_add" / "kineto.json.gz"
    if not trace.is_file():
        pytest.skip(f"{trace} not present")
    code, _, err = cli(fit_workspace.home, "collect", "trace", "--kineto", trace, "--platform", "gpu-x",
                       "--device-kind", "cuda", "--measured-ms", 5)   # the truth predictions are judged against
    assert code == 0, err
    return fit_workspace


def test_overheads_and_predictions_are_mlflow_runs(fit_workspace, shared_data):
    ws = _trace_workspace(fit_workspace, shared_data)
    code, out, err = cli(ws.home, "fit", "overheads", "--platform", "gpu-x")
    assert code == 0 and "logged to MLflow (experiment pmdb-overheads)" in out, err
    code, out, err = cli(ws.home, "predict", "--trace-set", 1, "--mode", "model", "--log-mlflow")
    assert code == 0 and "logged to MLflow (experiment pmdb-predictions): 1 run(s)" in out, err
    client = MlflowClient(ws.mlflow_uri)
    with Store.open(ws, read_only=True) as store:
        overhead_run = store.scalar("SELECT run_id FROM overhead_versions WHERE overhead_version = 1")
        t1 = store.scalar("SELECT median(mean_us) FROM overheads WHERE overhead_version = 1 AND kind = 'T1'")
        pred = store.query("SELECT prediction_id, run_id, predicted_us, measured_us FROM predictions").iloc[0]
    [overheads] = client.search_runs([client.get_experiment_by_name("pmdb-overheads").experiment_id])
    assert overheads.data.tags["overhead_version"] == "1" and overheads.data.tags["pmdb.run"] == overhead_run
    assert overheads.data.metrics["T1_median_mean_us"] == pytest.approx(t1)
    experiment = client.get_experiment_by_name("pmdb-predictions")
    assert experiment.artifact_location == (ws.mlflow_artifacts / "pmdb-predictions").resolve().as_uri()
    [logged] = client.search_runs([experiment.experiment_id])
    tags, metrics = logged.data.tags, logged.data.metrics
    assert (tags["prediction_id"], tags["trace_set_id"], tags["pmdb.run"]) == (
        str(pred["prediction_id"]), "1", pred["run_id"])
    assert tags["mode"] == "model" and tags["model_selection"].startswith("champion/")
    assert metrics["predicted_ms"] == pytest.approx(pred["predicted_us"] / 1000)
    assert metrics["measured_ms"] == pytest.approx(pred["measured_us"] / 1000) == pytest.approx(5.0)
    assert metrics["error_pct"] == pytest.approx(100 * (pred["predicted_us"] / pred["measured_us"] - 1))


def test_predict_imports_no_mlflow_unless_asked(fit_workspace, shared_data):
    ws = _trace_workspace(fit_workspace, shared_data)
    probe = ("import sys; from pmdb.cli.main import main; "
             f"code = main(['--home', {str(ws.home)!r}, 'predict', '--trace-set', '1', '--mode', 'replay']); "
             "print('exit', code, 'mlflow' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip().splitlines()[-1] == "exit 0 False", done.stderr[-2000:]
