"""The model registry: MLflow (the workspace's sqlite store, artifacts inside the workspace) and its DuckDB mirror.

* One MLflow experiment per platform (``pmdb/<platform>``); each fit is one run with params, test metrics and
  artifacts (the model, its feature spec, the split, plots).
* Registered model names: ``pmdb.<platform>.<op>.<pass>[.<implementation>][.<dtype>].<cache_state>`` for kernel models
  (the implementation when it is not ``torch``, the dtype when it is not ``float32``) and
  ``pmdb.<platform>.<collective>.ws<N>`` for collectives. Every fit makes a new version.
* Aliases: ``champion`` (MLflow alias, mirrored) and ``latest`` (MLflow reserves that alias name: it resolves
  ``models:/NAME/latest`` to the newest version itself; the mirror records it explicitly).
* ``model_versions`` / ``model_aliases`` in DuckDB mirror every version and alias, so SQL can join predictions to
  the models that made them.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version as dist_version
from pathlib import Path
from typing import Any

import pmdb  # noqa: F401  (sets the MLflow environment before mlflow is imported)
from fitters.model import MODEL_FILE, Model
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store

CHAMPION = "champion"
LATEST = "latest"
ENTRY_POINT = Path(__file__).with_name("pyfunc_entry.py")
MODEL_DIR = "pmdb_model"
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no per-file progress bars in our output
_REQUIREMENT_DISTS = ("torch", "numpy", "pandas", "scikit-learn", "skops", "scipy", "mlflow")


def kernel_model_name(platform: str, op: str, pass_: str, implementation: str, dtype: str, cache_state: str) -> str:
    parts = ["pmdb", platform, op, pass_]
    if implementation != "torch":
        parts.append(implementation)
    if dtype != "float32":
        parts.append(dtype)
    return ".".join(parts + [cache_state])


def collective_model_name(platform: str, collective: str, world_size: int) -> str:
    return f"pmdb.{platform}.{collective}.ws{int(world_size)}"


@dataclass
class VersionRecord:
    """Everything logged and mirrored about one fitted model besides the model itself."""

    name: str
    platform: str
    op: str
    family: str
    pass_: str | None = None
    implementation: str | None = None
    dtype: str | None = None
    cache_state: str | None = None
    world_size: int | None = None
    seed: int = 0
    data_runs: list[str] = field(default_factory=list)
    data_hash: str = ""
    n_dropped: int = 0
    n_train: int = 0
    n_test: int = 0
    metrics: dict[str, float] = field(default_factory=dict)       # test split: gmae, mape, std, ...
    histogram: dict[str, Any] = field(default_factory=dict)       # test relative-error histogram
    fit_seconds: float = 0.0


def _requirements() -> list[str]:
    out = []
    for dist in _REQUIREMENT_DISTS:
        try:
            out.append(f"{dist}=={dist_version(dist).split('+')[0]}")
        except PackageNotFoundError:
            continue
    return out


@lru_cache(maxsize=None)
def _client(uri: str) -> Any:
    import mlflow
    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.ERROR)  # e.g. "signature cannot be inferred": we log none on purpose
    logging.getLogger("alembic").setLevel(logging.WARNING)
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    client.search_experiments(max_results=1)  # creates and migrates the sqlite store once, in this process
    return client


class Registry:
    """MLflow access for one workspace (creates the sqlite store on first use)."""

    def __init__(self, workspace: Workspace):
        self.workspace = workspace
        workspace.mlflow_artifacts.mkdir(parents=True, exist_ok=True)
        self.uri = workspace.mlflow_uri
        self.client = _client(self.uri)
        import mlflow
        mlflow.set_tracking_uri(self.uri)
        mlflow.set_registry_uri(self.uri)

    def experiment_id(self, platform: str) -> str:
        name = f"pmdb/{platform}"
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = (self.workspace.mlflow_artifacts / platform).resolve()
        location.mkdir(parents=True, exist_ok=True)
        return self.client.create_experiment(name, artifact_location=location.as_uri(),
                                             tags={"pmdb.platform": platform})

    # ---- logging -------------------------------------------------------------------------------------------
    def log_version(self, store: Store, fit_run_id: str | None, record: VersionRecord, model: Model,
                    figures: list[Path], split: dict[str, Any]) -> int:
        """One MLflow run + a new registered version + the mirror row and the ``latest`` alias. Returns the version."""
        import mlflow

        experiment = self.experiment_id(record.platform)
        run_name = f"{record.op}.{record.pass_ or f'ws{record.world_size}'}.{record.cache_state or ''}.{record.family}"
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model_dir = model.save(Path(tmp) / MODEL_DIR)
            with mlflow.start_run(experiment_id=experiment, run_name=run_name.replace("..", ".")) as run:
                mlflow.set_tags({"pmdb.fit_run": fit_run_id or "", "pmdb.model_name": record.name,
                                 "family": record.family, "data_hash": record.data_hash})
                mlflow.log_params(_params(record, model))
                mlflow.log_metrics({f"test_{k}": float(v) for k, v in record.metrics.items() if _finite(v)}
                                   | {"n_train": record.n_train, "n_test": record.n_test,
                                      "fit_seconds": record.fit_seconds})
                mlflow.log_dict(model.features(), "feature_spec.json")
                mlflow.log_dict({"metrics": record.metrics, "histogram": record.histogram, **split}, "split.json")
                for figure in figures:
                    mlflow.log_artifact(str(figure), "plots")
                info = mlflow.pyfunc.log_model(name="model", python_model=str(ENTRY_POINT),
                                               artifacts={"model": str(model_dir)}, pip_requirements=_requirements())
            tags = {"family": record.family, "data_hash": record.data_hash, "op": record.op,
                    "pass": record.pass_ or "", "cache_state": record.cache_state or "",
                    "implementation": record.implementation or "", "world_size": str(record.world_size or "")}
            self._ensure_registered(record.name, record.platform)
            version = int(self.client.create_model_version(record.name, info.model_uri, run_id=run.info.run_id,
                                                           tags=tags, model_id=info.model_id).version)
        _mirror_version(store, record, model, version, run.info.run_id, fit_run_id, info.model_uri)
        set_mirror_alias(store, record.name, LATEST, version)
        return version

    def _ensure_registered(self, name: str, platform: str) -> None:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(name)
        except MlflowException:
            self.client.create_registered_model(name, tags={"pmdb.platform": platform})

    # ---- aliases and loading -------------------------------------------------------------------------------
    def set_champion(self, store: Store, name: str, version: int) -> None:
        self.client.set_registered_model_alias(name, CHAMPION, str(version))
        set_mirror_alias(store, name, CHAMPION, version)

    def resolve_version(self, name: str, version: int | str) -> int:
        """The version number of ``name`` at a number, ``latest`` or an alias (``champion``)."""
        from mlflow.exceptions import MlflowException

        text = str(version)
        try:
            if text.isdigit():
                return int(self.client.get_model_version(name, text).version)
            if text == LATEST:
                versions = self.client.search_model_versions(f"name = '{name}'", max_results=1,
                                                              order_by=["version_number DESC"])
                if not versions:
                    raise MlflowException(f"{name} has no versions")
                return int(versions[0].version)
            return int(self.client.get_model_version_by_alias(name, text).version)
        except MlflowException as exc:
            raise PmdbError(f"no registered model version {name} {text} in {self.uri} "
                            f"({str(exc).splitlines()[0][:200]})") from None

    def download(self, name: str, version: int | str) -> Path:
        """Local directory of the pmdb model of ``name`` at a version number or an alias, through the registry
        (``models:/NAME/VERSION``); versions are immutable, so each is fetched once into artifacts/model_cache/."""
        import mlflow

        number = self.resolve_version(name, version)
        target = cache_root(self.workspace, name, number)
        if not (target / "artifacts" / MODEL_DIR / MODEL_FILE).is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{number}-"))
            mlflow.artifacts.download_artifacts(f"models:/{name}/{number}", dst_path=str(staging),
                                                tracking_uri=self.uri)
            if not (staging / "artifacts" / MODEL_DIR / MODEL_FILE).is_file():
                shutil.rmtree(staging, ignore_errors=True)
                raise PmdbError(f"models:/{name}/{number} has no pmdb model directory")
            try:
                staging.rename(target)  # atomic: a concurrent loader either sees all of it or fetches its own
            except OSError:
                shutil.rmtree(staging, ignore_errors=True)
        return target / "artifacts" / MODEL_DIR


def cache_root(workspace: Workspace, name: str, version: int) -> Path:
    """Where :meth:`Registry.download` keeps a fetched version: artifacts/model_cache/NAME/VERSION (versions are
    immutable, so a present copy is that version)."""
    return workspace.artifacts / "model_cache" / name / str(int(version))


def _finite(value: Any) -> bool:
    try:
        return value == value and abs(float(value)) != float("inf")
    except (TypeError, ValueError):
        return False


def _params(record: VersionRecord, model: Model) -> dict[str, Any]:
    """MLflow params: identity, data selection and the scalar hyper/fitted parameters (lists as JSON text)."""
    described = {k: (json.dumps(v, default=str)[:5000] if isinstance(v, (list, dict)) else v)
                 for k, v in model.describe().items()}
    features = model.features()
    names = features.get("names") or features.get("per_table") or features.get("inputs") or []
    return {"op": record.op, "pass": record.pass_, "family": record.family, "implementation": record.implementation,
            "dtype": record.dtype, "cache_state": record.cache_state, "world_size": record.world_size,
            "seed": record.seed, "features": ",".join(map(str, names))[:5000],
            "data_runs": ",".join(record.data_runs)[:5000], "data_rows": record.n_train + record.n_test,
            "data_dropped": record.n_dropped, "data_hash": record.data_hash,
            **{f"model.{k}": v for k, v in described.items()}}


def _mirror_version(store: Store, record: VersionRecord, model: Model, version: int, mlflow_run_id: str,
                    fit_run_id: str | None, model_uri: str) -> None:
    store.insert_one("model_versions", {
        "name": record.name, "version": version, "mlflow_run_id": mlflow_run_id, "run_id": fit_run_id,
        "platform": record.platform, "op": record.op, "pass": record.pass_, "world_size": record.world_size,
        "implementation": record.implementation, "dtype": record.dtype, "cache_state": record.cache_state,
        "family": record.family, "params": model.describe(), "features": model.features(),
        "test_gmae": record.metrics.get("gmae"), "test_mape": record.metrics.get("mape"),
        "test_std": record.metrics.get("std"), "test_error_hist": record.histogram, "n_train": record.n_train,
        "n_test": record.n_test, "n_dropped": record.n_dropped, "data_hash": record.data_hash,
        "data_runs": record.data_runs, "model_uri": model_uri})


def set_mirror_alias(store: Store, name: str, alias: str, version: int) -> None:
    store.conn.execute("INSERT OR REPLACE INTO model_aliases (name, alias, version) VALUES (?, ?, ?)",
                       [name, alias, int(version)])


def choose_champion(store: Store, name: str, run_id: str | None = None) -> int | None:
    """Lowest test GMAE among the newest version of each family fitted on the newest version's data (same hash).
    Only versions of completed runs count, and those of ``run_id`` (the fit in progress that asks): a version of a fit
    that was interrupted or failed never becomes champion."""
    return store.scalar(
        "WITH eligible AS (SELECT * FROM model_versions WHERE name = ? AND (run_id IS NULL OR run_id = ? OR run_id IN "
        "  (SELECT run_id FROM collection_runs WHERE status = 'completed'))), "
        "newest AS (SELECT data_hash FROM eligible ORDER BY version DESC LIMIT 1), "
        "per_family AS (SELECT * FROM eligible QUALIFY row_number() OVER (PARTITION BY family ORDER BY version DESC) = 1) "
        "SELECT version FROM per_family WHERE data_hash = (SELECT data_hash FROM newest) AND test_gmae IS NOT NULL "
        "ORDER BY test_gmae, version DESC LIMIT 1", [name, run_id])


def promote(store: Store, registry: Registry, name: str, version: int) -> None:
    """Move ``champion`` of ``name`` to ``version`` (which must exist)."""
    if not store.scalar("SELECT count(*) FROM model_versions WHERE name = ? AND version = ?", [name, int(version)]):
        known = store.query("SELECT version FROM model_versions WHERE name = ? ORDER BY version", [name])["version"]
        if known.empty:
            raise PmdbError(f"no registered model named {name!r} (see `pmdb models`)")
        raise PmdbError(f"{name} has no version {version} (versions: {', '.join(map(str, known))})")
    registry.set_champion(store, name, int(version))
