"""`fit_models` end to end on a real store and a real MLflow registry: versions, aliases, the DuckDB mirror,
reloading by alias and by version, test-only metrics, dropped rows, too little data, promotion."""
import json
import shutil

import mlflow
import numpy as np
import pandas as pd
import pytest

from fitters import data, registry
from fitters.fit import FitOptions, fit_models
from fitters.load import load_model, select_models
from fitters.split import split_rows
from fitters.selection import MIN_VALIDATION_CONFIGS, NESTED_BELOW
from fitters.model import TrainConfig
from pmdb import metrics
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

TINY = TrainConfig(max_trials=1, max_epochs=100, patience=50)
PLATFORM = "synthetic-cpu"
FC = f"fully_connected.fwd.cold~{PLATFORM}"
EMB = f"embedding_lookup.fwd.fbgemm_tbe.cold~{PLATFORM}"
AR = f"all_reduce.ws2~{PLATFORM}"


def _options(**kw):
    return FitOptions(budget_minutes=0.1, train_config=TINY, progress=False, **kw)


def _new_workspace(tmp_path_factory, template, name):
    ws = Workspace(tmp_path_factory.mktemp(name) / "ws")
    Store.open(ws, create=True).close()
    shutil.copy(template.mlflow_db, ws.mlflow_db)
    return ws


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, mlflow_template, synthetic):
    """A workspace with synthetic gemm (plus three bad rows), embedding and all_reduce data, fitted once."""
    ws = _new_workspace(tmp_path_factory, mlflow_template, "fitted")
    with Store.open(ws) as store:
        configs = synthetic.gemm_configs(60)
        times = list(synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.03, 1))
        bad = [{"B": 1, "M": 3, "N": 3, "K": 3 + i} for i in range(3)]
        synthetic.insert_ops(store, "fully_connected", configs + bad, times + [float("nan"), 0.0, -5.0])
        synthetic.insert_peaks(store)
        cfg, stats, exact = synthetic.embedding_data(40)
        synthetic.insert_ops(store, "embedding_lookup", cfg, list(synthetic.noisy(exact, 0.03, 2)),
                             implementation="fbgemm_tbe", stats=stats)
        sizes, ctimes = synthetic.collective_points(sigma=0.02, seed=3)
        synthetic.insert_collectives(store, "all_reduce", 2, sizes, ctimes)
        results, notes = fit_models(store, ws, PLATFORM, _options())
    return ws, results, notes


def test_every_group_and_family_is_registered_with_a_champion(fitted):
    ws, results, notes = fitted
    assert notes == []
    assert sorted(results["name"].unique()) == sorted([AR, EMB, FC])
    assert sorted(results.loc[results["name"] == FC, "family"]) == ["gbdt", "mlp", "roofline"]
    assert sorted(results.loc[results["name"] == EMB, "family"]) == ["embedding_linear", "embedding_mlp"]
    with Store.open(ws, read_only=True) as store:
        versions = store.query("SELECT * FROM model_versions ORDER BY name, version")
        aliases = store.query("SELECT * FROM model_aliases")
        run = store.query("SELECT status, summary FROM collection_runs WHERE kind = 'fit'")
    assert run["status"].tolist() == ["completed"]
    assert len(versions) == len(results) == 6
    client = registry.Registry(ws).client
    # the families of one kernel or embedding group are scored on its training side, the test split never choosing;
    # these small groups (fewer than NESTED_BELOW configurations in a validation part) by cross-validation over every
    # training configuration (one row each here); a collective has one family and no validation score
    scored = versions[versions["name"] != AR]
    assert scored["validation_gmae"].notna().all()
    assert (scored["validation_configs"] == scored["n_train"]).all()
    assert (scored["validation_configs"] >= MIN_VALIDATION_CONFIGS).all()
    assert (0.15 * scored["n_train"] < NESTED_BELOW).all()
    assert versions.loc[versions["name"] == AR, ["validation_gmae", "validation_configs"]].isna().all().all()
    for name, rows in versions.groupby("name"):
        best = rows.loc[rows["test_gmae" if name == AR else "validation_gmae"].idxmin(), "version"]
        mirror = aliases.set_index(["name", "alias"])["version"]
        assert mirror[(name, "champion")] == best == client.get_model_version_by_alias(name, "champion").version
        assert mirror[(name, "latest")] == rows["version"].max()
        assert client.get_model_version(name, str(best)).tags["data_hash"] == rows["data_hash"].iloc[0]
    fc = versions[versions["name"] == FC]
    assert (fc["n_dropped"] == 3).all() and (fc["n_train"] + fc["n_test"] == 60).all()
    assert fc["data_hash"].nunique() == 1 and fc["dtype"].eq("float32").all()
    hist = json.loads(fc["test_error_hist"].iloc[0])
    assert sum(hist["counts"]) == fc["n_test"].iloc[0]



def test_models_all_shows_the_validation_gmae_that_chose_the_champion(fitted, capsys):
    """`pmdb models --all`: each version's validation GMAE (val%) beside its test GMAE; a collective has none."""
    from pmdb.cli.main import main

    ws, _, _ = fitted
    assert main(["--home", str(ws.home), "models", "--all", "--platform", PLATFORM]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.startswith("name"))
    assert header.split()[:6] == ["name", "ver", "family", "gmae%", "val%", "n_test"]
    with Store.open(ws, read_only=True) as store:
        roofline = store.query("SELECT validation_gmae FROM model_versions WHERE name = ? AND family = 'roofline'",
                               [FC])["validation_gmae"].iloc[0]
    row = next(line.split() for line in lines if line.startswith("fully_connected") and " roofline " in line)
    assert float(row[4]) == pytest.approx(100 * roofline, abs=0.006)
    assert next(line.split() for line in lines if line.startswith("all_reduce"))[4] == "-"
    assert all(len(line) <= 80 for line in lines)

def test_reload_by_alias_and_version_predicts_the_same(fitted):
    ws, results, _ = fitted
    with Store.open(ws, read_only=True) as store:
        refs = {r.name: r for r in select_models(store, PLATFORM)}
        params = store.query("SELECT params FROM v_op_measurements WHERE op = 'fully_connected' LIMIT 25")
    frame = pd.DataFrame([json.loads(p) for p in params["params"]])
    ref = refs[FC]
    by_version = load_model(ws, FC, ref.version).predict(frame)
    by_alias = load_model(ws, FC, "champion").predict(frame)
    pyfunc = mlflow.pyfunc.load_model(f"models:/{FC}@champion").predict(frame)
    assert np.allclose(by_version, by_alias) and np.allclose(by_version, np.asarray(pyfunc))
    assert np.isfinite(by_version).all() and (by_version > 0).all()
    # every family, by version and by alias (champion moved to it), directly and as MLflow pyfunc; the planner's
    # call passes (M, N, K) arrays only
    reg = registry.Registry(ws)
    with Store.open(ws) as store:
        for version in results.loc[results["name"] == FC, "version"]:
            registry.promote(store, reg, FC, int(version))
            direct = load_model(ws, FC, int(version)).predict(frame[["M", "N", "K"]])
            assert direct.shape == (25,)
            assert np.allclose(load_model(ws, FC, "champion").predict(frame), direct)
            assert np.allclose(np.asarray(mlflow.pyfunc.load_model(f"models:/{FC}@champion").predict(frame)), direct)
            assert np.allclose(np.asarray(mlflow.pyfunc.load_model(f"models:/{FC}/{version}").predict(frame)), direct)
        registry.promote(store, reg, FC, ref.version)
    for name in (EMB, AR):
        assert refs[name].family in ("embedding_linear", "embedding_mlp", "sigmoid")
        assert reg.resolve_version(name, "champion") == refs[name].version
    assert reg.resolve_version(AR, "champion") == reg.resolve_version(AR, "latest")  # one family, one version
    with Store.open(ws, read_only=True) as store:
        tables = next(g for g in data.kernel_groups(store, PLATFORM, ["embedding_lookup"])).params.head(7)
    emb = load_model(ws, EMB, refs[EMB].version).predict(tables)
    via_mlflow = mlflow.pyfunc.load_model(f"models:/{EMB}@champion").predict(tables)  # list columns pass through
    assert emb.shape == (7,) and np.allclose(np.asarray(via_mlflow), emb)
    coll = load_model(ws, AR, "champion").predict(pd.DataFrame({"max_rank_bytes": [4, 2 ** 20, 2 ** 26]}))
    assert coll.shape == (3,) and (np.diff(coll) > 0).all()
    assert refs[AR].world_size == 2 and refs[AR].pass_ is None and refs[EMB].implementation == "fbgemm_tbe"


def test_reported_metrics_come_from_the_test_rows_only(fitted):
    ws, results, _ = fitted
    client = registry.Registry(ws).client
    with Store.open(ws, read_only=True) as store:
        rows = store.query("SELECT measurement_id, config_key, params, median_us FROM v_op_measurements "
                           "WHERE op = 'fully_connected' AND isfinite(median_us) AND median_us > 0 "
                           "ORDER BY measurement_id")
        versions = store.query(f"SELECT version, family, test_gmae, mlflow_run_id FROM model_versions "
                               f"WHERE name = '{FC}'")
    split = split_rows(rows["config_key"], 0)
    frame = pd.DataFrame([json.loads(p) for p in rows["params"]])
    times = rows["median_us"].to_numpy()
    for version in versions.itertuples():
        logged = json.loads(open(mlflow.artifacts.download_artifacts(
            run_id=version.mlflow_run_id, artifact_path="split.json")).read())
        assert logged["test_ids"] == rows["measurement_id"].iloc[split.test].tolist()
        assert set(logged["train_ids"]).isdisjoint(logged["test_ids"])
        predicted = load_model(ws, FC, version.version).predict(frame)
        on_test = metrics.gmae(predicted[split.test], times[split.test])
        assert version.test_gmae == pytest.approx(on_test, rel=1e-9)
        assert client.get_run(version.mlflow_run_id).data.metrics["test_gmae_pct"] == pytest.approx(100 * on_test)
    gbdt = versions[versions["family"] == "gbdt"].iloc[0]
    predicted = load_model(ws, FC, int(gbdt["version"])).predict(frame)
    # the trees fit their own rows better than held-out ones: had training rows leaked into the score, it would drop
    assert metrics.gmae(predicted[split.train], times[split.train]) < gbdt["test_gmae"]


def test_refit_adds_versions_and_promote_moves_champion(fitted):
    ws, _, _ = fitted
    with Store.open(ws) as store:
        again, _ = fit_models(store, ws, PLATFORM, _options(ops=["all_reduce"], family="sigmoid"))
        assert again["version"].tolist() == [2] and again["champion"].tolist() == [True]
        reg = registry.Registry(ws)
        registry.promote(store, reg, AR, 1)
        assert store.scalar("SELECT version FROM model_aliases WHERE name = ? AND alias = 'champion'", [AR]) == 1
        assert int(reg.client.get_model_version_by_alias(AR, "champion").version) == 1
        with pytest.raises(PmdbError, match="has no version 7"):
            registry.promote(store, reg, AR, 7)
        with pytest.raises(PmdbError, match="no registered model named"):
            registry.promote(store, reg, "pmdb.nope", 1)


def test_too_little_data_names_the_op_and_count_and_fits_nothing(tmp_path_factory, mlflow_template, synthetic):
    ws = _new_workspace(tmp_path_factory, mlflow_template, "small")
    with Store.open(ws) as store:
        configs = synthetic.gemm_configs(6)
        synthetic.insert_ops(store, "bmm", configs, [synthetic.gemm_law(c) for c in configs])
        with pytest.raises(PmdbError, match=r"too little data.*bmm fwd .*: 6 rows"):
            fit_models(store, ws, PLATFORM, _options(ops=["bmm"]))
        with pytest.raises(PmdbError, match="no measurements of conv2d"):
            fit_models(store, ws, PLATFORM, _options(ops=["conv2d"]))
        assert store.scalar("SELECT count(*) FROM model_versions") == 0
        assert store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'fit'") == 0
    assert registry.Registry(ws).client.search_registered_models() == []


def test_bad_family_or_cache_is_a_user_error(fitted):
    ws, _, _ = fitted
    with Store.open(ws) as store:
        with pytest.raises(PmdbError, match="bad --family 'nope'"):
            fit_models(store, ws, PLATFORM, _options(family="nope"))
        with pytest.raises(PmdbError, match="bad --cache 'hot'"):
            fit_models(store, ws, PLATFORM, _options(cache="hot"))
