"""The model registry: MLflow (the workspace's sqlite store, artifacts inside the workspace; or a shared tracking
server, ``--tracking-uri``) and its DuckDB mirror (checked against each other by :mod:`fitters.registry_mirror`).

* One MLflow experiment per platform (``pmdb/<platform>``); each fitting command is one parent run (``pmdb fit
  --platform P --all (run <store run id>)``) whose nested runs are its fits, each with params, test metrics in percent
  (``test_gmae_pct``, ...; the mirror keeps fractions) and artifacts (the model, its feature spec, the split, plots).
* Registered model names put what is modelled first and the platform last, after ``~``:
  ``<op>.<pass>[.<implementation>][.<dtype>].<cache_state>~<platform>`` for kernel models (the implementation when
  it is not ``torch``, the dtype when it is not ``float32``) and ``<collective>.ws<N>~<platform>`` for collectives
  (MLflow names are global, so the platform stays in the name; registered models and versions also carry a
  ``platform`` tag). Names registered before (``pmdb.<platform>.<what>``, :func:`legacy_name`) keep getting their new
  versions (:func:`registered_name`), and a user's name in either form finds them (:func:`known_name`). Every fit
  makes a new version, described in one line (family, test GMAE, train n, platform, date).
* Aliases: ``champion`` (MLflow alias, mirrored; the family with the lowest validation GMAE,
  ``validation_gmae_pct`` in MLflow, :func:`choose_champion`) and ``latest`` (MLflow reserves that alias name: it
  resolves ``models:/NAME/latest`` to the newest version itself; the mirror records it explicitly).
* ``model_versions`` / ``model_aliases`` in DuckDB mirror every version and alias, so SQL can join predictions to
  the models that made them.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version as dist_version
from pathlib import Path
from typing import Any, Iterator

import pmdb  # noqa: F401  (sets the MLflow environment before mlflow is imported)
from fitters.model import MODEL_FILE, Model
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Run, Store

CHAMPION = "champion"
LATEST = "latest"
ENTRY_POINT = Path(__file__).with_name("pyfunc_entry.py")
MODEL_DIR = "pmdb_model"
SERVER_TIMEOUT_S = 10.0  # a tracking server's /health must answer within this
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no per-file progress bars in our output
_REQUIREMENT_DISTS = ("torch", "numpy", "pandas", "scikit-learn", "skops", "scipy", "mlflow")


PLATFORM_SEP = "~"            # <what>~<platform> (not "@": MLflow reads models:/A@B/1 as alias B of A)
LEGACY_PREFIX = "pmdb."       # pmdb.<platform>.<what>: the names registered before
NAME_PATTERNS = ("%~%", "pmdb.%")  # MLflow LIKE filters that together match every name pmdb registers


def model_name(platform: str, *what: str) -> str:
    """``<what joined by dots>~<platform>``, e.g. ``relu.fwd.cold~cpu-box``."""
    return ".".join(what) + PLATFORM_SEP + platform


def kernel_model_name(platform: str, op: str, pass_: str, implementation: str, dtype: str, cache_state: str) -> str:
    parts = [op, pass_]
    if implementation != "torch":
        parts.append(implementation)
    if dtype != "float32":
        parts.append(dtype)
    return model_name(platform, *parts, cache_state)


def collective_model_name(platform: str, collective: str, world_size: int) -> str:
    return model_name(platform, collective, f"ws{int(world_size)}")


def legacy_name(name: str, platform: str) -> str | None:
    """The name the model of ``name`` (``<what>~<platform>``) was registered under before: ``pmdb.<platform>.<what>``
    (None when ``name`` is not of that platform)."""
    suffix = PLATFORM_SEP + platform
    return f"{LEGACY_PREFIX}{platform}.{name[:-len(suffix)]}" if name.endswith(suffix) else None


def readable_name(name: str, platform: str) -> str | None:
    """The readable form of a legacy name of ``platform`` (None when ``name`` is not one)."""
    prefix = f"{LEGACY_PREFIX}{platform}."
    return name[len(prefix):] + PLATFORM_SEP + platform if name.startswith(prefix) else None


def _mirrored(store: Store, name: str) -> bool:
    return bool(store.scalar("SELECT count(*) FROM model_versions WHERE name = ?", [name]))


def registered_name(store: Store, name: str, platform: str) -> str:
    """The name a new version of ``name`` is registered under: its legacy form when the store's mirror holds versions
    under that name and none under ``name`` (a model keeps one name, so its versions and champion stay together),
    else ``name``."""
    old = legacy_name(name, platform)
    if old is None or _mirrored(store, name) or not _mirrored(store, old):
        return name
    return old


def known_name(store: Store, name: str) -> str:
    """A user's model name as the store's mirror holds it: ``name`` when mirrored, else its other form (readable or
    legacy) when that is mirrored, else ``name`` unchanged (the caller's lookup says it is unknown)."""
    if _mirrored(store, name):
        return name
    for platform in store.query("SELECT DISTINCT platform FROM model_versions")["platform"].dropna():
        for other in (legacy_name(name, str(platform)), readable_name(name, str(platform))):
            if other is not None and _mirrored(store, other):
                return other
    return name


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
    validation_gmae: float | None = None   # on the training side's validation rows: what chooses the champion
    validation_configs: int | None = None  # configurations in that part (fitters.selection)
    histogram: dict[str, Any] = field(default_factory=dict)       # test relative-error histogram
    fit_seconds: float = 0.0


@lru_cache(maxsize=None)
def _requirement_pins() -> tuple[str, ...]:
    """The installed versions of the distributions a logged model needs (read once per process)."""
    out = []
    for dist in _REQUIREMENT_DISTS:
        try:
            out.append(f"{dist}=={dist_version(dist).split('+')[0]}")
        except PackageNotFoundError:
            continue
    return tuple(out)


def _requirements() -> list[str]:
    return list(_requirement_pins())


def _use_uri(uri: str) -> None:
    """Point MLflow's fluent API at ``uri`` without leaving it in $MLFLOW_TRACKING_URI/$MLFLOW_REGISTRY_URI
    (MLflow sets them for its subprocesses; pmdb reads $MLFLOW_TRACKING_URI as the user's choice of registry)."""
    import mlflow

    saved = {var: os.environ.get(var) for var in ("MLFLOW_TRACKING_URI", "MLFLOW_REGISTRY_URI")}
    mlflow.set_tracking_uri(uri)
    mlflow.set_registry_uri(uri)
    for var, value in saved.items():
        if value is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = value


def _probe(uri: str) -> None:
    """A tracking server that does not answer /health within SERVER_TIMEOUT_S is one line, not minutes of retries."""
    try:
        urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=SERVER_TIMEOUT_S).close()
    except urllib.error.HTTPError:
        return  # it answered
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PmdbError(f"the MLflow tracking server at {uri} does not answer ({reason}): start it, or give "
                        f"another --tracking-uri (or none: the workspace's mlflow.db)") from None


@lru_cache(maxsize=None)
def _schema_head() -> str | None:
    """The newest MLflow schema revision this MLflow knows (alembic head of its migrations)."""
    import mlflow
    from alembic.script import ScriptDirectory

    try:
        return ScriptDirectory(str(Path(mlflow.__file__).parent / "store" / "db_migrations")).get_current_head()
    except Exception:  # noqa: BLE001  (an MLflow without its migrations folder: cannot tell)
        return None


def half_migrated(db: Path) -> str | None:
    """Why the MLflow sqlite file ``db`` is not a usable store of this MLflow (a schema migration that stopped
    midway, e.g. on a full disk, leaves it so for good), or None when it is usable or absent."""
    if not db.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)) as conn:
            tables = {t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            revision = (conn.execute("SELECT version_num FROM alembic_version").fetchone() or [None])[0] \
                if "alembic_version" in tables else None
    except sqlite3.Error as exc:
        return f"it does not read as an MLflow store ({exc})"
    stray = sorted(t for t in tables if t.startswith("_alembic_tmp_"))
    if stray:
        return f"an MLflow schema migration stopped midway (table {stray[0]} left)"
    head = _schema_head()
    if revision is None:
        return "it has no MLflow schema version (its creation stopped midway)"
    if head is not None and revision != head:
        return f"its MLflow schema stopped at revision {revision}, not this MLflow's {head}"
    return None


class RegistryWriteError(PmdbError):
    """The MLflow store could not be created (disk full): exit 1, nothing fitted, no partial mlflow.db left."""

    exit_code = 1


def create_local_registry(workspace: Workspace) -> None:
    """Create and migrate the workspace's mlflow.db when missing, in a temporary file renamed into place when
    complete: a full disk fails here in one line and leaves no half-migrated store. Refuse (one line) one that
    a stopped migration left half-migrated."""
    db = workspace.mlflow_db
    reason = half_migrated(db)
    if reason:
        raise PmdbError(f"the MLflow registry {db} is half-migrated: {reason}; "
                        f"`{_doctor_repair(workspace)}` moves it aside and rebuilds it from the model files")
    if db.exists():
        return
    from mlflow import MlflowClient

    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("mlflow").setLevel(logging.ERROR)
    temporary = db.with_name(f"{db.name}.creating-{os.getpid()}")
    try:
        client = MlflowClient(tracking_uri=f"sqlite:///{temporary.resolve()}",
                              registry_uri=f"sqlite:///{temporary.resolve()}")
        client.search_experiments(max_results=1)   # creates every table and runs every migration
        for store in (getattr(client, "_tracking_client", None), getattr(client, "_registry_client", None)):
            engine = getattr(getattr(store, "store", None), "engine", None)
            if engine is not None:
                engine.dispose()
        os.replace(temporary, db)
    except Exception as exc:  # noqa: BLE001  (a full disk, an I/O error inside MLflow's migration)
        for path in temporary.parent.glob(temporary.name + "*"):
            path.unlink(missing_ok=True)
        lines = str(exc).strip().splitlines()
        reason = lines[0][:200] if lines else type(exc).__name__
        raise RegistryWriteError(f"creating the MLflow registry {db} failed ({reason}): free disk space, then "
                                 f"re-run; nothing was fitted") from None


def _doctor_repair(workspace: Workspace) -> str:
    from pmdb.store_check import pmdb_command

    return pmdb_command(workspace, "doctor --repair")


@lru_cache(maxsize=None)
def _client(uri: str) -> Any:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    logging.getLogger("mlflow").setLevel(logging.ERROR)  # e.g. "signature cannot be inferred": we log none on purpose
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if uri.startswith(("http://", "https://")):
        _probe(uri)
    _use_uri(uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    try:
        client.search_experiments(max_results=1)  # creates and migrates the sqlite store once, in this process
    except MlflowException as exc:
        raise PmdbError(f"the MLflow registry at {uri} failed: {str(exc).splitlines()[0][:300]}") from None
    return client


class Registry:
    """MLflow access for one workspace: its mlflow.db (created on first use) or ``workspace.mlflow_uri`` (a shared
    tracking server). Given the ``store``, it first checks that the registry holds the versions the store mirrors
    (:func:`fitters.registry_mirror.require_mirrored`), so a lost mlflow.db is never silently started afresh."""

    def __init__(self, workspace: Workspace, store: Store | None = None):
        self.workspace = workspace
        workspace.mlflow_artifacts.mkdir(parents=True, exist_ok=True)
        self.uri = workspace.mlflow_uri
        self.local = self.uri == workspace.local_mlflow_uri   # the workspace's own mlflow.db
        self._mirror_checked = False
        self._experiments: dict[str, str] = {}   # experiment name -> id, looked up (or created) once
        self._registered: set[str] = set()       # registered model names known to exist
        self._deferred: dict[str, int] | None = None  # champion moves waiting for the run to complete
        if store is not None:
            self.check_mirror(store)
        if self.local:
            create_local_registry(workspace)   # before any fit work: complete, or absent with one line
        self.client = _client(self.uri)
        _use_uri(self.uri)
        if self.local:
            default_experiment_inside(workspace)

    def check_mirror(self, store: Store) -> None:
        """Refuse (one line) when the registry lacks versions the store mirrors; checked once per Registry."""
        if not self._mirror_checked:
            from fitters.registry_mirror import require_mirrored

            require_mirrored(store, self.workspace)
            self._mirror_checked = True

    def experiment_id(self, platform: str) -> str:
        """The platform's experiment ``pmdb/<platform>`` (its artifacts in artifacts/mlflow/<platform>)."""
        return self.experiment(f"pmdb/{platform}", platform, {"pmdb.platform": platform})

    def experiment(self, name: str, folder: str, tags: dict[str, str] | None = None) -> str:
        """The id of experiment ``name``, created on first use with its artifacts in artifacts/mlflow/``folder``
        (a shared server keeps them where it is configured to). Looked up once per Registry."""
        if name not in self._experiments:
            self._experiments[name] = self._experiment(name, folder, tags)
        return self._experiments[name]

    def _experiment(self, name: str, folder: str, tags: dict[str, str] | None) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        if not self.local:
            return self.client.create_experiment(name, tags=tags)
        location = (self.workspace.mlflow_artifacts / folder).resolve()
        location.mkdir(parents=True, exist_ok=True)
        return self.client.create_experiment(name, artifact_location=location.as_uri(), tags=tags)

    @contextmanager
    def parent_run(self, platform: str, command: str, fit_run_id: str) -> Iterator[dict[str, float]]:
        """One MLflow run per fitting command, named ``<command> (run <fit_run_id>)``: the versions logged inside it
        are its nested runs. Yields a dict of metrics, logged on the parent when the body ends without error."""
        import mlflow

        totals: dict[str, float] = {}
        with mlflow.start_run(experiment_id=self.experiment_id(platform), run_name=f"{command} (run {fit_run_id})",
                              tags={"pmdb.fit_run": fit_run_id, "pmdb.command": command, "platform": platform}):
            yield totals
            if totals:
                mlflow.log_metrics({k: float(v) for k, v in totals.items() if _finite(v)})

    # ---- logging -------------------------------------------------------------------------------------------
    def log_version(self, store: Store, fit_run_id: str | None, record: VersionRecord, model: Model,
                    figures: list[Path], split: dict[str, Any]) -> int:
        """One MLflow run (nested in the active :meth:`parent_run`, if any) + a new registered version + the mirror
        row and the ``latest`` alias. ``record.name`` becomes the name registered (:func:`registered_name`: a model
        registered under its legacy name keeps it). Returns the version."""
        return self.log_version_run(store, fit_run_id, record, model, figures, split)[0]

    def log_version_run(self, store: Store, fit_run_id: str | None, record: VersionRecord, model: Model,
                        figures: list[Path], split: dict[str, Any]) -> tuple[int, str]:
        """:meth:`log_version`, returning (version, MLflow run id): figures drawn later are attached to that run
        with :meth:`attach_figures`."""
        import mlflow
        from mlflow.entities import Metric, Param
        from mlflow.utils.time import get_current_time_millis

        self.check_mirror(store)
        record.name = registered_name(store, record.name, record.platform)
        experiment = self.experiment_id(record.platform)
        run_name = f"{record.op}.{record.pass_ or f'ws{record.world_size}'}.{record.cache_state or ''}.{record.family}"
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model_dir = model.save(Path(tmp) / MODEL_DIR)
            run_tags = without_empty({"pmdb.fit_run": fit_run_id, "pmdb.model_name": record.name,
                                      "family": record.family, "data_hash": record.data_hash,
                                      "platform": record.platform})
            with mlflow.start_run(experiment_id=experiment, run_name=run_name.replace("..", "."),
                                  nested=mlflow.active_run() is not None, tags=run_tags) as run:
                run_id = run.info.run_id
                # params before the model (MLflow copies the run's params onto the logged model), metrics after it,
                # in one batch naming the model: logged before, MLflow would read each metric's history back and
                # log it a second time for the model (a fifth of a version's registration)
                self.client.log_batch(run_id, params=[Param(k, str(v)) for k, v in _params(record, model).items()])
                self.client.log_artifacts(run_id, str(_json_files(Path(tmp) / "json", {
                    "feature_spec.json": model.features(),
                    "split.json": {"metrics": record.metrics, "histogram": record.histogram, **split}})))
                for figure in figures:
                    self.client.log_artifact(run_id, str(figure), "plots")
                info = log_pyfunc(model_dir)
                metrics = percent_metrics(record.metrics) | {"n_train": record.n_train, "n_test": record.n_test,
                                                             "fit_seconds": record.fit_seconds}
                if record.validation_gmae is not None:
                    metrics["validation_gmae_pct"] = 100.0 * record.validation_gmae
                if record.validation_configs is not None:
                    metrics["validation_configs"] = record.validation_configs
                now = get_current_time_millis()
                self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0, model_id=info.model_id,
                                                              run_id=run_id) for k, v in metrics.items()])
            # what the name does not say (op, pass, cache state, world size are in it, and in the run's params)
            tags = without_empty({"family": record.family, "platform": record.platform,
                                  "pmdb.fit_run": fit_run_id, "data_hash": record.data_hash})
            self._ensure_registered(record)
            version = int(self.client.create_model_version(record.name, info.model_uri, run_id=run.info.run_id,
                                                           tags=tags, model_id=info.model_id,
                                                           description=describe_version(record)).version)
        _mirror_version(store, record, model, version, run.info.run_id, fit_run_id, info.model_uri)
        set_mirror_alias(store, record.name, LATEST, version)
        return version, run.info.run_id

    def attach_figures(self, run_id: str, figures: list[Path]) -> None:
        """Log figures (drawn after the version's run ended) into the run's ``plots`` artifacts, where
        :meth:`log_version` puts the figures it is given."""
        for figure in figures:
            self.client.log_artifact(run_id, str(figure), "plots")

    def _ensure_registered(self, record: VersionRecord) -> None:
        from mlflow.exceptions import MlflowException

        if record.name in self._registered:
            return
        try:
            self.client.get_registered_model(record.name)
        except MlflowException:
            self.client.create_registered_model(
                record.name, tags={"platform": record.platform},  # the models list shows it whole
                description=f"{describe_model(record)}. One version per fit; the alias champion marks the "
                            f"version predictions use.")
        self._registered.add(record.name)

    # ---- aliases and loading -------------------------------------------------------------------------------
    def set_champion(self, store: Store, name: str, version: int) -> None:
        """Move ``champion`` of ``name`` to ``version``: at once, or, inside :meth:`champions_on_completion`, when
        that run completes."""
        if self._deferred is not None:
            self._deferred[name] = int(version)
            return
        self.client.set_registered_model_alias(name, CHAMPION, str(version))
        set_mirror_alias(store, name, CHAMPION, version)

    def champions_on_completion(self, store: Store, run: Run) -> None:
        """From now on champion moves wait for ``run`` to complete: the store's aliases (what predict uses) are
        written in the transaction that marks it completed; :meth:`publish_champions` then sets MLflow's. A run
        killed, failed or interrupted before moves no champion (MLflow's lag behind the store's at worst, which
        ``pmdb doctor --repair`` aligns)."""
        self._deferred = {}
        deferred = self._deferred

        def write() -> None:
            for name, version in deferred.items():
                set_mirror_alias(store, name, CHAMPION, version)
        run.on_complete.append(write)

    def publish_champions(self) -> None:
        """MLflow's champions set to the moves the completed run wrote to the store; moves go direct again."""
        deferred, self._deferred = self._deferred or {}, None
        try:
            for name, version in deferred.items():
                self.client.set_registered_model_alias(name, CHAMPION, str(version))
        except Exception as exc:  # noqa: BLE001  (the fit completed; the store's champions are the ones used)
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
            print(f"pmdb: warning: MLflow's champions were not all moved ({first}); the store's are; "
                  f"`{_doctor_repair(self.workspace)}` aligns them", file=sys.stderr)

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


def _json_files(folder: Path, documents: dict[str, Any]) -> Path:
    """Write each document as ``folder/<name>`` (JSON, as ``mlflow.log_dict`` writes it); the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, document in documents.items():
        (folder / name).write_text(json.dumps(document, indent=2, default=str), encoding="utf-8")
    return folder


def log_pyfunc(model_dir: Path) -> Any:
    """Log a pmdb model directory as the active run's pyfunc model ``model``; MLflow's ModelInfo."""
    import mlflow

    return mlflow.pyfunc.log_model(name="model", python_model=str(ENTRY_POINT), artifacts={"model": str(model_dir)},
                                   pip_requirements=_requirements())


def cache_root(workspace: Workspace, name: str, version: int) -> Path:
    """Where :meth:`Registry.download` keeps a fetched version: artifacts/model_cache/NAME/VERSION (versions are
    immutable, so a present copy is that version)."""
    return workspace.artifacts / "model_cache" / name / str(int(version))


def without_empty(tags: dict[str, Any]) -> dict[str, str]:
    """Tags as text, leaving out the ones that do not apply (None or empty)."""
    return {k: str(v) for k, v in tags.items() if v is not None and str(v) != ""}


def percent_metrics(metrics: dict[str, Any]) -> dict[str, float]:
    """MLflow's view of a version's test metrics: relative errors (fractions in the mirror) as ``test_<k>_pct`` in
    percent, as the CLI prints them; the row count ``n`` is logged as ``n_test`` already."""
    return {f"test_{k}_pct": 100.0 * float(v) for k, v in metrics.items() if k != "n" and _finite(v)}


def describe_model(record: VersionRecord) -> str:
    """What a registered model models: 'relu fwd (cold cache) on cpu-box', 'all_reduce over 2 ranks on cpu-box'."""
    if record.pass_ is None and record.world_size is not None:
        what = f"{record.op} over {record.world_size} ranks" + (f" ({record.family})" if record.family == "in_context"
                                                                else "")
    else:
        notes = [x for x in (None if record.implementation in (None, "torch") else record.implementation,
                             None if record.dtype in (None, "float32") else record.dtype,
                             f"{record.cache_state} cache" if record.cache_state in ("warm", "cold")
                             else record.cache_state) if x]
        what = " ".join(x for x in (record.op, record.pass_) if x) + (f" ({', '.join(notes)})" if notes else "")
    return f"{what} on {record.platform}"


def describe_version(record: VersionRecord) -> str:
    """One line for the version's MLflow description: 'gbdt, test GMAE 21.3% (n=5), noise floor 2.0%, train n=40,
    platform cpu-box, fitted 2026-11-25'."""
    gmae, noise = record.metrics.get("gmae"), record.metrics.get("replicate_gmae")
    parts = [record.family, f"test GMAE {100 * float(gmae):.1f}% (n={record.n_test})" if _finite(gmae)
             else "no test error (nothing held out)"]
    if _finite(noise):
        parts.append(f"noise floor {100 * float(noise):.1f}%")
    parts += [f"train n={record.n_train}", f"platform {record.platform}", f"fitted {time.strftime('%Y-%m-%d')}"]
    return ", ".join(parts)


def default_experiment_inside(workspace: Workspace) -> None:
    """MLflow creates its ``Default`` experiment with the artifact root of the creating process's working directory
    (./mlruns); point it at artifacts/mlflow/Default while it holds no runs (pmdb logs none there)."""
    target = (workspace.mlflow_artifacts / "Default").resolve().as_uri()
    try:
        with contextlib.closing(sqlite3.connect(workspace.mlflow_db, timeout=30)) as conn:
            row = conn.execute("SELECT artifact_location FROM experiments WHERE experiment_id = 0").fetchone()
            if row is None or row[0] == target:
                return
            if conn.execute("SELECT count(*) FROM runs WHERE experiment_id = 0").fetchone()[0]:
                return
            with conn:
                conn.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0", [target])
    except sqlite3.Error:
        return  # a store MLflow can use but sqlite cannot change: leave it as MLflow made it


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
        "validation_gmae": record.validation_gmae, "validation_configs": record.validation_configs,
        "n_test": record.n_test, "n_dropped": record.n_dropped, "data_hash": record.data_hash,
        "data_runs": record.data_runs, "model_uri": model_uri})


def set_mirror_alias(store: Store, name: str, alias: str, version: int) -> None:
    store.conn.execute("INSERT OR REPLACE INTO model_aliases (name, alias, version) VALUES (?, ?, ?)",
                       [name, alias, int(version)])


def choose_champion(store: Store, name: str, run_id: str | None = None) -> int | None:
    """The champion among the newest version of each family fitted on the newest version's data (same hash), by
    :func:`fitters.selection.champion_of` (the test split never choosing, but for versions registered before
    migration 0021). Only versions of completed runs count, and those of ``run_id`` (the fit in progress that asks):
    a version of a fit that was interrupted or failed never becomes champion."""
    from fitters.selection import champion_of
    candidates = store.query(
        "WITH eligible AS (SELECT * FROM model_versions WHERE name = ? AND (run_id IS NULL OR run_id = ? OR run_id IN "
        "  (SELECT run_id FROM collection_runs WHERE status = 'completed'))), "
        "newest AS (SELECT data_hash FROM eligible ORDER BY version DESC LIMIT 1), "
        "per_family AS (SELECT * FROM eligible "
        "  QUALIFY row_number() OVER (PARTITION BY family ORDER BY version DESC) = 1) "
        "SELECT version, family, test_gmae, validation_gmae, validation_configs FROM per_family "
        "WHERE data_hash = (SELECT data_hash FROM newest) AND test_gmae IS NOT NULL", [name, run_id])
    chosen = champion_of(candidates)
    return None if chosen is None else int(candidates.at[chosen, "version"])


def promote(store: Store, registry: Registry, name: str, version: int) -> None:
    """Move ``champion`` of ``name`` (either name form, :func:`known_name`) to ``version`` (which must exist)."""
    registry.check_mirror(store)
    name = known_name(store, name)
    if not store.scalar("SELECT count(*) FROM model_versions WHERE name = ? AND version = ?", [name, int(version)]):
        known = store.query("SELECT version FROM model_versions WHERE name = ? ORDER BY version", [name])["version"]
        if known.empty:
            raise PmdbError(f"no registered model named {name!r} (see `pmdb models`)")
        raise PmdbError(f"{name} has no version {version} (versions: {', '.join(map(str, known))})")
    registry.set_champion(store, name, int(version))
