"""The fitters on data written by the REAL collectors: a tiny ops sweep and a gloo sweep run here, and the shared
A100 NCCL all-reduce files imported through the real nccl-tests importer."""
import numpy as np
import pandas as pd
import pytest

from fitters.fit import FitOptions, fit_models
from fitters.load import load_model, select_models
from fitters.model import TrainConfig
from pmdb import platform as platforms
from pmdb.store import Store

from harness import in_process

TINY = TrainConfig(max_trials=1, max_epochs=300, patience=150)


def _pmdb(ws, *args):
    """``pmdb --home WS ARGS`` in this process (:func:`harness.in_process`; the collectors spawn their own ranks)."""
    proc = in_process(ws.home, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.mark.slow
def test_fit_all_on_collected_ops_and_gloo_sweep(fit_workspace):
    ws = fit_workspace
    _pmdb(ws, "collect", "ops", "--op", "relu", "--op", "embedding_lookup", "--sweep", "quick", "--pass", "fwd",
          "--cache", "cold", "--no-progress")
    _pmdb(ws, "collect", "comms", "--world-size", "2", "--ops", "all_to_all,all_to_allv", "--max-bytes", "128KiB",
          "--iters", "5", "--warmup", "2", "--no-progress")
    with Store.open(ws) as store:
        platform = platforms.resolve(store, None)
        results, notes = fit_models(store, ws, platform, FitOptions(budget_minutes=0.1, train_config=TINY,
                                                                    progress=False))
        groups = store.query("SELECT DISTINCT op, pass, implementation, cache_state FROM v_op_measurements")
        refs = select_models(store, platform)
        versions = store.query("SELECT name, family, n_test, test_gmae FROM model_versions")
        random_points = store.scalar("SELECT count(*) FROM v_collective_measurements WHERE rank IS NULL "
                                     "AND collective = 'all_to_allv'")
        params = store.query("SELECT CAST(params AS VARCHAR) AS p FROM v_op_measurements WHERE op = 'relu'")
    assert notes == []
    # one champion per kernel group (relu and the two embedding implementations) and per collective
    assert len(groups) == 3 and len(refs) == 3 + 1 == versions["name"].nunique()
    assert {r.op for r in refs} == {"relu", "embedding_lookup", "all_to_all"}
    assert versions["test_gmae"].between(0, 10).all() and (versions["n_test"] > 0).all()
    assert set(versions.loc[versions["name"].str.contains("relu"), "family"]) == {"roofline", "mlp", "gbdt"}
    a2a = versions[versions["name"].str.startswith("all_to_all.ws2~")]
    assert random_points > 0 and a2a["n_test"].iloc[0] >= random_points  # all_to_allv points are test points
    relu = next(r for r in refs if r.op == "relu")
    frame = pd.read_json(pd.io.common.StringIO("[" + ",".join(params["p"]) + "]"))
    out = load_model(ws, relu.name, relu.version).predict(frame)
    assert out.shape == (len(frame),) and np.isfinite(out).all() and (out > 0).all()


def test_a100_nccl_all_reduce_through_the_real_importer(fit_workspace, shared_data):
    from collectors.importers import nccl_tests
    from collectors.importers.common import import_files

    folder = shared_data / "collectives" / "vtrain_a100_allreduce"
    ws = fit_workspace
    with Store.open(ws) as store:
        import_files(store, [folder / "AR_GPU2.csv", folder / "AR_GPU8.csv"], "nccl-tests", nccl_tests.parse,
                     platform="a100-vtrain")
        results, _ = fit_models(store, ws, "a100-vtrain", FitOptions(family="sigmoid", progress=False))
    assert sorted(results["name"]) == ["all_reduce.ws2~a100-vtrain", "all_reduce.ws8~a100-vtrain"]
    # 1024 sizes, two rows each (out-of-place and in-place): every fifth size held out
    assert (results["n_test"] == 2 * 204).all() and (results["n_train"] == 2 * 820).all()
    assert (results["test_gmae"] < 0.05).all(), results[["name", "test_gmae"]]  # the target; paper: 4.98%
