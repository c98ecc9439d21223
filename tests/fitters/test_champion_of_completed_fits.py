"""Champions move only when a fit completes: a version registered by a fit that was interrupted (Ctrl-C inside its
run) or failed never becomes champion, however good its test error; the fit in progress counts its own versions.
Real store and run lifecycle (the KeyboardInterrupt is what Ctrl-C raises)."""
from __future__ import annotations

import pytest

from fitters.registry import choose_champion
from fitters.selection import MIN_VALIDATION_CONFIGS
from pmdb import platform as platforms

NAME = "pmdb.box.relu.fwd.cold"


def _version(store, run_id: str, version: int, gmae: float) -> None:
    store.insert_one("model_versions", {"name": NAME, "version": version, "mlflow_run_id": f"m{version}",
                                        "run_id": run_id, "platform": "box", "op": "relu", "pass": "fwd",
                                        "family": ("roofline", "mlp", "gbdt")[version - 1], "test_gmae": gmae,
                                        "data_hash": "same-rows"})


def test_versions_of_unfinished_fits_never_become_champion(store):
    platforms.ensure_named(store, "box", device_kind="cpu")
    with store.run("fit", "box", {}) as done:
        _version(store, done.run_id, 1, 0.10)
    with pytest.raises(KeyboardInterrupt):
        with store.run("fit", "box", {}) as stopped:
            _version(store, stopped.run_id, 2, 0.01)
            raise KeyboardInterrupt
    with pytest.raises(RuntimeError):
        with store.run("fit", "box", {}) as failed:
            _version(store, failed.run_id, 3, 0.001)
            raise RuntimeError("a fit that failed")
    assert store.scalar("SELECT status FROM collection_runs WHERE run_id = ?", [stopped.run_id]) == "interrupted"
    assert choose_champion(store, NAME) == 1                      # the better versions' fits did not complete
    assert choose_champion(store, NAME, stopped.run_id) == 2      # what that fit would have chosen while running



def _scored(store, run_id: str, version: int, test: float, validation: float | None, rows: int | None = 100) -> None:
    store.insert_one("model_versions", {"name": NAME, "version": version, "mlflow_run_id": f"m{version}",
                                        "run_id": run_id, "platform": "box", "op": "relu", "pass": "fwd",
                                        "family": ("roofline", "mlp", "gbdt")[version - 1], "test_gmae": test,
                                        "validation_gmae": validation, "data_hash": "same-rows",
                                        "validation_configs": None if validation is None else rows})


def test_the_validation_split_chooses_the_champion_not_the_test_split(store):
    """The family best on the training side's validation rows wins, even where another did better on test: the
    test split never chooses, so the champion's test GMAE stays a held-out figure."""
    platforms.ensure_named(store, "box", device_kind="cpu")
    with store.run("fit", "box", {}) as done:
        _scored(store, done.run_id, 1, test=0.05, validation=0.09)
        _scored(store, done.run_id, 2, test=0.08, validation=0.04)
        _scored(store, done.run_id, 3, test=0.03, validation=0.06)
    assert choose_champion(store, NAME) == 2


def test_too_few_validation_configs_make_the_analytic_family_champion(store):
    """Below MIN_VALIDATION_CONFIGS no score chooses (a learned family's is tuned on those rows): the roofline is
    champion whatever the validation and test figures say."""
    platforms.ensure_named(store, "box", device_kind="cpu")
    few = MIN_VALIDATION_CONFIGS - 1
    with store.run("fit", "box", {}) as done:
        _scored(store, done.run_id, 1, test=0.09, validation=0.09, rows=few)
        _scored(store, done.run_id, 2, test=0.02, validation=0.01, rows=few)
        _scored(store, done.run_id, 3, test=0.03, validation=0.02, rows=few)
    assert choose_champion(store, NAME) == 1


def test_candidates_without_a_validation_score_are_ranked_by_test_as_before(store):
    """A version registered before validation scores were kept (NULL, migration 0021) among the candidates: all are
    ranked by test GMAE, as the store's earlier champions were, never a validation figure against a test one."""
    platforms.ensure_named(store, "box", device_kind="cpu")
    with store.run("fit", "box", {}) as done:
        _scored(store, done.run_id, 1, test=0.05, validation=None)
        _scored(store, done.run_id, 2, test=0.08, validation=0.01)
        _scored(store, done.run_id, 3, test=0.03, validation=0.06)
    assert choose_champion(store, NAME) == 3
