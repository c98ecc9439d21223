"""Fits bounded by counted work, not by the clock: the same data and seed give the same model (bitwise), also while
a busy process competes for the cores; another seed may differ; a tiny --budget-minutes cap is recorded
(``budget_hit``: model description, MLflow tag, the fit run's summary, a warning)."""
import json
import subprocess
import sys

import mlflow
import numpy as np
import pandas as pd
import pytest

from fitters import embedding, gbdt, mlp
from fitters.fit import FitOptions, counted_work, fit_models
from fitters.model import TrainConfig, TrainingSet
from pmdb.errors import PmdbError
from pmdb.store import Store

from .conftest import cli, one_line_error

SMALL = TrainConfig(max_trials=2, max_epochs=60, patience=60, min_epochs=10)
PLATFORM = "synthetic-cpu"


def _gemm_training(synthetic, n=80, seed=1) -> tuple[TrainingSet, pd.DataFrame]:
    configs = synthetic.gemm_configs(n)
    params = pd.DataFrame(configs).astype(float)
    times = synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.03, seed)
    keys = params.astype(int).astype(str).agg("-".join, axis=1).to_numpy()
    return TrainingSet("fully_connected", "fwd", "float32", params, times, keys), params


def _embedding_training(synthetic, n=60) -> tuple[TrainingSet, pd.DataFrame]:
    _, stats, exact = synthetic.embedding_data(n)
    frame = pd.DataFrame({c: [[t[c] for t in tables] for tables in stats]
                          for c in ("batch_size", "num_rows", "pooling_mean", "dim", "reuse_factors")})
    keys = np.arange(n).astype(str)
    return TrainingSet("embedding_lookup", "fwd", "float32", frame, synthetic.noisy(exact, 0.03, 2), keys), frame


@pytest.fixture
def busy_neighbour():
    """A python busy loop competing for the cores while the test runs (what made time-budgeted fits differ)."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield proc
    proc.kill()
    proc.wait()


FITS = {
    "mlp": (_gemm_training, lambda training, seed, budget_s: mlp.fit(training, seed, budget_s, SMALL)),
    "gbdt": (_gemm_training, lambda training, seed, budget_s: gbdt.fit(training, seed, budget_s, max_trials=3)),
    "embedding_mlp": (_embedding_training,
                      lambda training, seed, budget_s: embedding.fit(training, seed, budget_s, SMALL)),
}


def _search(model) -> dict:
    return model.describe()["search"]


@pytest.mark.parametrize("family", list(FITS))
def test_same_seed_same_model_bitwise_even_beside_a_busy_process(synthetic, family, busy_neighbour):
    make, fit = FITS[family]
    training, frame = make(synthetic)
    first = fit(training, 3, float("inf"))
    second = fit(training, 3, 600.0)   # a cap that is not reached changes nothing
    assert busy_neighbour.poll() is None   # the neighbour was busy throughout
    assert np.array_equal(first.predict(frame), second.predict(frame))
    described = [{k: v for k, v in m.describe().items() if k != "search"} for m in (first, second)]
    assert described[0] == described[1]        # chosen hyperparameters (and everything else described)
    scores = [[(t["val_score"], t.get("epochs", t.get("iterations"))) for t in _search(m)["trials"]]
              for m in (first, second)]
    assert scores[0] == scores[1]
    assert len(scores[0]) == _search(first)["work"]["max_trials"] >= 2   # every counted candidate was tried
    assert not first.budget_hit and not second.budget_hit


@pytest.mark.parametrize("family", ["mlp", "gbdt"])
def test_another_seed_may_give_another_model(synthetic, family):
    make, fit = FITS[family]
    training, frame = make(synthetic)
    assert not np.array_equal(fit(training, 0, float("inf")).predict(frame),
                              fit(training, 1, float("inf")).predict(frame))


@pytest.mark.parametrize("family", list(FITS))
def test_a_spent_cap_cuts_the_search_and_says_so(synthetic, family):
    make, fit = FITS[family]
    training, frame = make(synthetic)
    model = fit(training, 3, 0.0)
    search = _search(model)
    assert model.budget_hit and search["budget_hit"] and model.describe()["budget_hit"] is True
    assert len(search["trials"]) == 1 < search["work"]["max_trials"]   # the first candidate only
    if family != "gbdt":
        assert search["trials"][0]["epochs"] == SMALL.min_epochs and search["refit"] is False
    assert np.isfinite(model.predict(frame)).all()


def test_counted_work_options():
    assert counted_work() == {"train_config": FitOptions().train_config, "gbdt_trials": FitOptions().gbdt_trials}
    work = counted_work(trials=3, max_epochs=20)
    assert work["gbdt_trials"] == 3 and work["train_config"].max_trials == 3
    assert work["train_config"].max_epochs == 20 and work["train_config"].min_epochs <= 20
    with pytest.raises(PmdbError, match="--trials"):
        counted_work(trials=0)


def _fit_store(store, synthetic) -> None:
    configs = synthetic.gemm_configs(40)
    synthetic.insert_ops(store, "fully_connected", configs,
                         list(synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.03, 1)))


def test_fit_records_the_cap_when_it_is_hit(fit_workspace, synthetic, capsys):
    ws = fit_workspace
    with Store.open(ws) as store:
        _fit_store(store, synthetic)
        options = dict(family="all", progress=False, train_config=SMALL, gbdt_trials=2)
        calm, _ = fit_models(store, ws, PLATFORM, FitOptions(budget_minutes=10, **options))
        assert "warning" not in capsys.readouterr().err
        hit, _ = fit_models(store, ws, PLATFORM, FitOptions(budget_minutes=1e-6, **options))
        err = capsys.readouterr().err
        summaries = store.query("SELECT summary FROM collection_runs WHERE kind = 'fit' ORDER BY started_at")
        params = store.query("SELECT version, family, params FROM model_versions ORDER BY version")
    assert not calm["budget_hit"].any()
    learned = hit[hit["family"].isin(["mlp", "gbdt"])]
    assert len(learned) == 2 and learned["budget_hit"].all()
    warning = [line for line in err.splitlines() if line.startswith("pmdb: warning:")]
    assert len(warning) == 1 and "--budget-minutes 1e-06 cap cut 2 of 2 searches short" in warning[0]
    first, second = (json.loads(s)["budget_hit"] for s in summaries["summary"])
    assert first == [] and sorted(second) == sorted(f"{n}:{v}" for n, v in zip(learned["name"], learned["version"]))
    by_version = {(r.family, r.version): json.loads(r.params) for r in params.itertuples()}
    assert all(by_version[(f, v)]["budget_hit"] for f, v in zip(learned["family"], learned["version"]))
    client = mlflow.MlflowClient(ws.mlflow_uri)
    for frame, expected in ((calm, False), (learned, True)):
        for row in frame[frame["family"].isin(["mlp", "gbdt"])].itertuples():
            run = client.get_run(client.get_model_version(row.name, str(row.version)).run_id)
            assert run.data.params["model.budget_hit"] == str(expected)
            assert run.data.tags.get("pmdb.budget_hit") == ("true" if expected else None)
    parents = client.search_runs([run.info.experiment_id], "tags.`pmdb.command` LIKE 'pmdb fit%'",
                                 order_by=["attributes.start_time ASC"])
    assert [p.data.tags["pmdb.budget_hit"] for p in parents] == ["false", "true"]


def test_cli_takes_the_counted_work_and_refuses_none(fit_workspace, synthetic):
    with Store.open(fit_workspace) as store:
        _fit_store(store, synthetic)
    one_line_error(cli(fit_workspace.home, "fit", "--all", "--trials", "0"), r"--trials")
    code, _, err = cli(fit_workspace.home, "fit", "--op", "fully_connected", "--family", "mlp", "--trials", "1",
                       "--max-epochs", "20", "--no-progress", "--platform", PLATFORM)
    assert code == 0 and "warning" not in err, err
    with Store.open(fit_workspace, read_only=True) as store:
        args = json.loads(store.scalar("SELECT args FROM collection_runs WHERE kind = 'fit'"))
        params = json.loads(store.scalar("SELECT params FROM model_versions WHERE family = 'mlp'"))
    assert (args["trials"], args["max_epochs"], args["gbdt_trials"]) == (1, 20, 1)
    trials = params["search"]["trials"]
    assert len(trials) == 1 and trials[0]["epochs"] <= 20 and params["budget_hit"] is False
