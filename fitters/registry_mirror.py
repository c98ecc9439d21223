"""The MLflow registry and the store's mirror of it (``model_versions``, ``model_aliases``) must agree.

* :func:`require_mirrored` — the guard of every command that uses the registry (fit, promote, predict): it refuses
  with one line when the registry lacks versions the store mirrors (a deleted or replaced mlflow.db, another
  tracking server), so a lost registry is never started afresh with a second "v1".
* :func:`compare` / :func:`checks` — ``pmdb doctor``: every mirrored version is registered with the same MLflow run,
  every registered version of this store's fits is mirrored, champions agree, model files exist.
* :func:`repair` — ``pmdb doctor --repair``: re-registers versions from their model files (artifacts/mlflow or the
  local model cache) under their own numbers, marks versions whose files are gone as lost (mirror alias
  ``lost-vN``; predict never uses them), sets MLflow's champions from the store's, tags stray MLflow versions.
  It deletes nothing: MLflow versions that disagree are set aside under another name, runs stay.
"""
from __future__ import annotations

import contextlib
import re
import shutil
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.store_check import Check, pmdb_command

if TYPE_CHECKING:  # the registry (MLflow), its models (numpy, pandas) load where used: `pmdb status` checks the
    import pandas as pd  # local registry without them

    from fitters.registry import Registry

LOST = "lost-v"                        # mirror alias lost-vN: version N's model files are gone
UNMIRRORED_TAG = "pmdb.unmirrored"     # MLflow version tag: known not to be in the store (a fit that died)
DISPLACED_TAG = "pmdb.displaced"       # registered model tag: versions set aside because they disagreed
RESTORED_TAG = "pmdb.restored_from_run"
_LOST_OF_M = f"'{LOST}' || CAST(m.version AS VARCHAR)"  # SQL: the lost alias of model_versions row m
_MODEL_ID = re.compile(r"^models:/(m-[0-9a-f]+)$")


def lost_alias(version: int) -> str:
    return f"{LOST}{int(version)}"


def describe(workspace: Workspace) -> str:
    """Where the registry is, for messages: the workspace's mlflow.db (and whether it exists) or the URI."""
    if workspace.mlflow_uri == workspace.local_mlflow_uri:
        return f"{workspace.mlflow_db}" + ("" if workspace.mlflow_db.exists() else " (missing)")
    return workspace.mlflow_uri


# ---- the mirror -------------------------------------------------------------------------------------------------
def mirror_rows(store: Store) -> pd.DataFrame:
    """Every mirrored version: name, version, mlflow_run_id, run_id, platform, op, model_uri, lost, champion."""
    frame = store.query(
        "SELECT m.name, m.version, m.mlflow_run_id, m.run_id, m.platform, m.op, m.pass AS pass_, m.cache_state, "
        "m.implementation, m.world_size, m.family, m.data_hash, m.test_gmae, m.test_mape, m.test_std, m.n_train, "
        "m.n_test, m.model_uri, "
        f"EXISTS (SELECT 1 FROM model_aliases a WHERE a.name = m.name AND a.alias = {_LOST_OF_M}) AS lost, "
        "EXISTS (SELECT 1 FROM model_aliases a WHERE a.name = m.name AND a.alias = 'champion' "
        "        AND a.version = m.version) AS champion "
        "FROM model_versions m ORDER BY m.name, m.version")
    frame["version"] = frame["version"].astype(int)
    return frame


def _local_triples(path: Path) -> set[tuple[str, int, str]] | None:
    """(name, version, run id) of the live versions in an MLflow sqlite file, read directly (no MLflow import);
    an empty set without the file, None when it cannot be read that way."""
    if not path.is_file():
        return set()
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
            rows = conn.execute("SELECT name, version, run_id FROM model_versions "
                                "WHERE current_stage <> 'Deleted_Internal'").fetchall()
    except sqlite3.Error:
        return None
    return {(name, int(version), run_id) for name, version, run_id in rows}


def require_mirrored(store: Store, workspace: Workspace) -> None:
    """Refuse with one line when the registry lacks versions the store mirrors (or holds them from other runs).
    A local registry is read directly (sqlite3): neither MLflow nor pandas is imported for it."""
    mirror = store.rows("SELECT name, version, mlflow_run_id FROM model_versions m WHERE NOT EXISTS "
                        "(SELECT 1 FROM model_aliases a WHERE a.name = m.name "
                        f"AND a.alias = {_LOST_OF_M})").rows
    if not mirror:
        return
    wanted = {(n, int(v), r) for n, v, r in mirror}
    held = None
    if workspace.mlflow_uri == workspace.local_mlflow_uri:
        held = _local_triples(workspace.mlflow_db)
    if held is None:
        from fitters.registry import Registry

        held = {(mv.name, int(mv.version), mv.run_id) for mv in _versions(Registry(workspace).client)}
    count = len(wanted & held)
    if count < len(wanted):
        elsewhere = " (fitted with --tracking-uri?)" if workspace.mlflow_uri == workspace.local_mlflow_uri else ""
        raise PmdbError(f"the MLflow registry at {describe(workspace)} holds {count} of the {len(wanted)} versions "
                        f"the store lists{elsewhere}; run `{pmdb_command(workspace, 'doctor')}` (`--repair` "
                        f"re-registers them)")


def require_usable(store: Store, platform: str, alias: str, versions: dict[str, int] | None) -> None:
    """The guard of model selection (predict, shard, planner): the registry holds the mirrored versions, and no
    version asked for (explicitly or by ``alias``) is marked lost."""
    require_mirrored(store, store.workspace)
    if versions:
        for name, version in versions.items():
            if store.scalar("SELECT count(*) FROM model_aliases WHERE name = ? AND alias = ?",
                            [name, lost_alias(version)]):
                raise PmdbError(f"{name} v{version} is marked lost (its model files are gone): choose another "
                                f"version (`pmdb models --all`)")
        return
    lost = store.query(
        "SELECT a.name, a.version FROM model_aliases a JOIN model_versions m USING (name, version) "
        f"WHERE m.platform = ? AND a.alias = ? AND EXISTS (SELECT 1 FROM model_aliases l WHERE l.name = a.name "
        f"AND l.alias = '{LOST}' || CAST(a.version AS VARCHAR))", [platform, alias])
    if not lost.empty:
        first = lost.iloc[0]
        raise PmdbError(f"{alias} of {first['name']} is v{first['version']}, which is marked lost (its model files "
                        f"are gone); {len(lost)} such: refit or `pmdb models promote NAME VERSION`")


# ---- the registry -----------------------------------------------------------------------------------------------
def _versions(client: Any) -> list[Any]:
    """Every live registered version whose name is pmdb's (``<what>~<platform>`` or legacy ``pmdb.*``)."""
    from fitters.registry import NAME_PATTERNS

    out, token = {}, None
    for pattern in NAME_PATTERNS:
        while True:
            page = client.search_model_versions(f"name LIKE '{pattern}'", max_results=10000, page_token=token)
            out.update({(mv.name, mv.version): mv for mv in page})
            token = page.token
            if not token:
                break
    return list(out.values())


def _models(client: Any) -> dict[str, Any]:
    """Registered models with pmdb's names (:data:`fitters.registry.NAME_PATTERNS`) by name (with their aliases
    and tags)."""
    from fitters.registry import NAME_PATTERNS

    out, token = {}, None
    for pattern in NAME_PATTERNS:
        while True:
            page = client.search_registered_models(f"name LIKE '{pattern}'", max_results=1000, page_token=token)
            out.update({m.name: m for m in page})
            token = page.token
            if not token:
                break
    return out


@dataclass
class Comparison:
    """What the store's mirror and the MLflow registry hold, side by side (versions as (name, version))."""

    where: str
    mirrored: int = 0                                           # mirror rows not marked lost
    held: int = 0                                               # of those, registered with the same run
    missing: list[tuple[str, int]] = field(default_factory=list)      # not registered at all
    conflicting: list[tuple[str, int]] = field(default_factory=list)  # registered from another run
    lost: list[tuple[str, int]] = field(default_factory=list)         # marked lost in the mirror
    unmirrored: list[tuple[str, int]] = field(default_factory=list)   # this store's fits, not mirrored
    others: int = 0                               # registered versions of other stores, or set aside / tagged
    champions: list[tuple[str, int | None, int | None]] = field(default_factory=list)  # (name, store, MLflow)
    foreign_champions: int = 0                    # MLflow champion at another store's version (shared registry)
    no_files: list[tuple[str, int]] = field(default_factory=list)     # local registry: model files gone
    registry_versions: dict[tuple[str, int], Any] = field(default_factory=dict)
    registry_models: dict[str, Any] = field(default_factory=dict)


def compare(store: Store, workspace: Workspace) -> Comparison:
    """Compare the mirror with the registry (without creating a missing mlflow.db)."""
    from fitters.registry import Registry

    mirror = mirror_rows(store)
    out = Comparison(describe(workspace))
    local = workspace.mlflow_uri == workspace.local_mlflow_uri
    client = None if local and not workspace.mlflow_db.exists() else Registry(workspace).client
    if client is not None:
        out.registry_versions = {(mv.name, int(mv.version)): mv for mv in _versions(client)}
        out.registry_models = _models(client)
    ours_runs = set(mirror["mlflow_run_id"])
    mirrored = {}
    for row in mirror.itertuples(index=False):
        key = (row.name, int(row.version))
        mirrored[key] = row
        found = out.registry_versions.get(key)
        if row.lost:
            out.lost.append(key)
            continue
        out.mirrored += 1
        if found is None:
            out.missing.append(key)
        elif found.run_id != row.mlflow_run_id:
            out.conflicting.append(key)
        else:
            out.held += 1
    fit_runs = set(store.query("SELECT run_id FROM collection_runs")["run_id"])
    for key, mv in out.registry_versions.items():
        if key in mirrored:
            continue
        model = out.registry_models.get(mv.name)
        acknowledged = UNMIRRORED_TAG in (mv.tags or {}) or (model is not None and DISPLACED_TAG in model.tags)
        if not acknowledged and (mv.run_id in ours_runs or _fit_run(client, mv.run_id) in fit_runs):
            out.unmirrored.append(key)
        else:
            out.others += 1
    if client is not None:
        _compare_champions(out, mirror, mirrored)
    if local:
        present = _local_model_ids(workspace)
        for key in (k for k in mirrored if k not in out.lost and k not in out.missing and k not in out.conflicting):
            model_id = _model_id(mirrored[key].model_uri)
            if model_id is not None and model_id not in present:
                out.no_files.append(key)
    return out


def _compare_champions(out: Comparison, mirror: pd.DataFrame, mirrored: dict) -> None:
    from fitters.registry import CHAMPION

    store_champions = {r.name: int(r.version) for r in mirror.itertuples(index=False) if r.champion}
    names = set(store_champions) | {n for n in out.registry_models if n in set(mirror["name"])}
    for name in sorted(names):
        model = out.registry_models.get(name)
        theirs = (model.aliases or {}).get(CHAMPION) if model is not None else None
        theirs = None if theirs is None else int(theirs)
        ours = store_champions.get(name)
        if theirs == ours:
            continue
        if theirs is not None and (name, theirs) not in mirrored:
            out.foreign_champions += 1  # another store's champion in a shared registry: not ours to move
            continue
        out.champions.append((name, ours, theirs))


def _fit_run(client: Any, run_id: str | None) -> str | None:
    """The pmdb fit run recorded on an MLflow run (tag ``pmdb.fit_run``), if any."""
    if client is None or not run_id:
        return None
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id).data.tags.get("pmdb.fit_run") or None
    except MlflowException:
        return None


def _model_id(model_uri: Any) -> str | None:
    found = _MODEL_ID.match(str(model_uri or ""))
    return found.group(1) if found else None


def _local_model_ids(workspace: Workspace) -> set[str]:
    """Logged models with files in artifacts/mlflow (``<experiment>/models/m-<id>/artifacts``)."""
    from fitters.model import MODEL_FILE
    from fitters.registry import MODEL_DIR

    root = workspace.mlflow_artifacts
    return {p.parents[3].name for p in root.glob(f"*/models/m-*/artifacts/artifacts/{MODEL_DIR}/{MODEL_FILE}")}


def checks(store: Store, workspace: Workspace) -> tuple[list[Check], Comparison]:
    """``pmdb doctor``'s lines about the registry: versions, unmirrored versions, champions, model files."""
    from fitters.registry import half_migrated

    fix = pmdb_command(workspace, "doctor --repair")
    local = workspace.mlflow_uri == workspace.local_mlflow_uri
    broken = half_migrated(workspace.mlflow_db) if local else None
    if broken:
        return [Check("registry", False, f"mlflow.db is half-migrated: {broken}", fix, repairable=True)], \
            Comparison(describe(workspace))
    cmp = compare(store, workspace)
    where = "mlflow.db" if local else "the registry"
    lost = f"; {len(cmp.lost)} marked lost" if cmp.lost else ""
    if local and not workspace.mlflow_db.exists() and not cmp.mirrored:
        out = [Check("registry", True, f"no versions yet (the first fit creates mlflow.db){lost}")]
    elif local and not workspace.mlflow_db.exists():
        out = [Check("registry", False, f"mlflow.db is missing; the store mirrors {cmp.mirrored} versions{lost}",
                     fix, repairable=True)]
    elif cmp.held == cmp.mirrored:
        out = [Check("registry", True, f"{where} holds all {cmp.mirrored} mirrored versions{lost}")]
    else:
        differ = f" ({len(cmp.conflicting)} differ)" if cmp.conflicting else ""
        out = [Check("registry", False, f"{where} holds {cmp.held} of the {cmp.mirrored} mirrored "
                     f"versions{differ}{lost}", fix, repairable=True)]
    others = f" (+{cmp.others} not ours)" if cmp.others else ""
    if cmp.unmirrored:
        out.append(Check("unmirrored", False, f"{len(cmp.unmirrored)} MLflow versions this store fitted are not "
                         f"mirrored", fix, repairable=True))
    else:
        out.append(Check("unmirrored", True, f"every version this store fitted is mirrored{others}"))
    if cmp.champions:
        out.append(Check("champions", False, f"MLflow differs from the store for {len(cmp.champions)} names",
                         fix, repairable=True))
    else:
        shared = f" ({cmp.foreign_champions} set by other stores)" if cmp.foreign_champions else ""
        out.append(Check("champions", True, f"MLflow's agree with the store's{shared}"))
    if local:
        if cmp.no_files:
            out.append(Check("files", False, f"{len(cmp.no_files)} versions have no model files in "
                             f"artifacts/mlflow", fix, repairable=True))
        else:
            out.append(Check("files", True, "every registered version has its model files"))
    return out, cmp


# ---- repair -----------------------------------------------------------------------------------------------------
def repair(store: Store, workspace: Workspace) -> list[str]:
    """Make the registry agree with the store's mirror without losing anything; one line per thing done."""
    from fitters.registry import Registry, half_migrated

    done: list[str] = []
    if workspace.mlflow_uri == workspace.local_mlflow_uri and half_migrated(workspace.mlflow_db):
        done.append(_move_aside(workspace.mlflow_db))   # rebuilt below from the model files, as a deleted one
    registry = Registry(workspace)
    cmp = compare(store, workspace)
    done += _restore_files(store, workspace, registry, cmp)
    cmp = compare(store, workspace)
    mirror = mirror_rows(store)
    restored = 0
    for name, rows in mirror.groupby("name", sort=True):
        wanted = {int(r.version): r for r in rows.itertuples(index=False) if not r.lost}
        have = {v: mv for (n, v), mv in cmp.registry_versions.items() if n == name}
        absent = sorted(v for v in wanted if v not in have or have[v].run_id != wanted[v].mlflow_run_id)
        if not absent:
            continue
        if any(v in have for v in absent) or absent[0] <= max(have, default=0):
            if not registry.local:
                done.append(f"{name}: its version numbers are taken in the shared registry; not re-registered")
                continue
            aside = _set_aside(registry, name)
            done.append(f"{name}: MLflow's versions disagreed with the store's; set aside as {aside}")
            have = {}
            absent = sorted(wanted)
        platform = str(rows["platform"].iloc[0])
        _ensure_model(registry, name, platform)
        for version in range(max(have, default=0) + 1, int(rows["version"].max()) + 1):  # lost ones keep numbers
            row = wanted.get(version)
            files = _model_files(workspace, registry, row) if row is not None else None
            with tempfile.TemporaryDirectory() as tmp:
                if files is not None and not isinstance(files, Path):
                    files = files(Path(tmp))
                if files is not None:
                    number, run_id, uri = _register(registry, row, files)
                else:
                    number, run_id, uri = _placeholder(registry, name, platform), None, None
            if number != version:
                done.append(f"{name}: MLflow numbered v{version} as v{number}; stopped re-registering {name}")
                with contextlib.suppress(Exception):
                    registry.client.delete_model_version(name, str(number))
                break
            if row is None:
                continue
            if run_id is not None:
                store.conn.execute("UPDATE model_versions SET mlflow_run_id = ?, model_uri = ? "
                                   "WHERE name = ? AND version = ?", [run_id, uri, name, version])
                restored += 1
            else:
                done.append(_mark_lost(store, name, version))
    if restored:
        done.append(f"re-registered {restored} versions from their model files (same numbers, new MLflow runs)")
    done += _repair_champions(store, workspace, registry)
    done += _tag_unmirrored(store, workspace, registry)
    return done


def _move_aside(db: Path) -> str:
    """Move a half-migrated mlflow.db (and its sqlite side files) aside, never deleting it; the line saying so."""
    aside = db.with_name(f"{db.name}.half-migrated-{time.strftime('%Y%m%d-%H%M%S')}")
    for side in ("", "-journal", "-wal", "-shm"):
        source = db.with_name(db.name + side)
        if source.exists():
            source.rename(aside.with_name(aside.name + side))
    return f"moved the half-migrated mlflow.db aside to {aside.name}; rebuilt it from the model files"


def _restore_files(store: Store, workspace: Workspace, registry: Registry, cmp: Comparison) -> list[str]:
    """Registered versions whose model files are gone from artifacts/mlflow: copied back from the local model
    cache (a fetched version is the whole logged model), else marked lost."""
    from fitters.model import MODEL_FILE
    from fitters.registry import MODEL_DIR, cache_root

    out, copied = [], 0
    for name, version in cmp.no_files:
        mv = cmp.registry_versions.get((name, version))
        cached = cache_root(workspace, name, version)
        location = _storage_path(registry, mv)
        if location is not None and (cached / "artifacts" / MODEL_DIR / MODEL_FILE).is_file():
            shutil.copytree(cached, location, dirs_exist_ok=True)
            copied += 1
        else:
            out.append(_mark_lost(store, name, version))
    if copied:
        out.insert(0, f"copied the model files of {copied} versions back from artifacts/model_cache")
    return out


def _storage_path(registry: Registry, mv: Any) -> Path | None:
    """The local directory a registered version's logged model lives in (file: storage only)."""
    model_id = None if mv is None else getattr(mv, "model_id", None) or _model_id(mv.source)
    if not model_id:
        return None
    try:
        location = registry.client.get_logged_model(model_id).artifact_location
    except Exception:  # noqa: BLE001  (any MLflow failure: no local location known)
        return None
    return Path(location[len("file://"):]) if location.startswith("file://") else None


def _mark_lost(store: Store, name: str, version: int) -> str:
    """Mark a mirrored version lost (mirror alias lost-vN); a champion there is dropped so predict never uses it."""
    from fitters.registry import set_mirror_alias

    set_mirror_alias(store, name, lost_alias(version), version)
    was_champion = store.scalar("SELECT count(*) FROM model_aliases WHERE name = ? AND alias = 'champion' "
                                "AND version = ?", [name, version])
    if was_champion:
        store.conn.execute("DELETE FROM model_aliases WHERE name = ? AND alias = 'champion'", [name])
        return (f"{name} v{version}: model files gone, marked {lost_alias(version)}; it was the champion: "
                f"refit or `pmdb models promote {name} VERSION`")
    return f"{name} v{version}: model files gone, marked {lost_alias(version)} (predict will not use it)"


def _model_files(workspace: Workspace, registry: Registry, row: Any) -> Any:
    """The pmdb model directory of a mirrored version: the logged model in artifacts/mlflow, else the local model
    cache, else (a callable fetching it into a directory) the logged model still known to the registry."""
    from fitters.model import MODEL_FILE
    from fitters.registry import MODEL_DIR, cache_root

    model_id = _model_id(row.model_uri)
    if model_id is not None:
        for found in workspace.mlflow_artifacts.glob(f"*/models/{model_id}/artifacts/artifacts/{MODEL_DIR}"):
            if (found / MODEL_FILE).is_file():
                return found
    cached = cache_root(workspace, row.name, int(row.version)) / "artifacts" / MODEL_DIR
    if (cached / MODEL_FILE).is_file():
        return cached
    if model_id is None:
        return None
    from mlflow.exceptions import MlflowException

    try:
        registry.client.get_logged_model(model_id)
    except MlflowException:
        return None

    def fetch(into: Path) -> Path | None:
        import mlflow

        mlflow.artifacts.download_artifacts(f"models:/{model_id}", dst_path=str(into), tracking_uri=registry.uri)
        found = into / "artifacts" / MODEL_DIR
        return found if (found / MODEL_FILE).is_file() else None
    return fetch


def _ensure_model(registry: Registry, name: str, platform: str) -> None:
    from mlflow.exceptions import MlflowException

    try:
        registry.client.get_registered_model(name)
    except MlflowException:
        registry.client.create_registered_model(name, tags={"pmdb.platform": platform})


def _set_aside(registry: Registry, name: str) -> str:
    """Rename a registered model whose versions disagree with the store (nothing is deleted) and tag it."""
    aside = f"{name}.displaced-{time.strftime('%Y%m%d-%H%M%S')}"
    registry.client.rename_registered_model(name, aside)
    registry.client.set_registered_model_tag(aside, DISPLACED_TAG,
                                             f"set aside by pmdb doctor --repair: its versions disagreed with the "
                                             f"store's mirror of {name}")
    return aside


def _register(registry: Registry, row: Any, files: Path) -> tuple[int, str, str]:
    """Log the model files in a new MLflow run and register them as the next version of ``row.name``; the run
    records the mirrored metrics and the run it replaces. Returns (version, run id, model URI)."""
    import mlflow
    import pandas as pd

    from fitters.registry import log_pyfunc

    experiment = registry.experiment_id(str(row.platform))
    with mlflow.start_run(experiment_id=experiment, run_name=f"restored {row.name} v{int(row.version)}") as run:
        mlflow.set_tags({"pmdb.fit_run": row.run_id or "", "pmdb.model_name": row.name, "family": row.family,
                         "data_hash": row.data_hash or "", RESTORED_TAG: row.mlflow_run_id})
        metrics = {f"test_{m}": getattr(row, f"test_{m}") for m in ("gmae", "mape", "std")}
        metrics |= {"n_train": row.n_train, "n_test": row.n_test}
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and not pd.isna(v)})
        old = next(registry.workspace.mlflow_artifacts.glob(f"*/{row.mlflow_run_id}/artifacts"), None)
        if old is not None and registry.local:
            mlflow.log_artifacts(str(old))
        info = log_pyfunc(files)
    tags = {"family": row.family, "data_hash": row.data_hash or "", "op": row.op, "pass": _text(row.pass_),
            "cache_state": _text(row.cache_state), "implementation": _text(row.implementation),
            "world_size": _text(row.world_size), RESTORED_TAG: row.mlflow_run_id}
    version = registry.client.create_model_version(row.name, info.model_uri, run_id=run.info.run_id, tags=tags,
                                                   model_id=info.model_id)
    return int(version.version), run.info.run_id, info.model_uri


def _text(value: Any) -> str:
    import pandas as pd

    if value is None or (isinstance(value, float) and pd.isna(value)):
        return ""
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _placeholder(registry: Registry, name: str, platform: str) -> int:
    """Take the next version number of ``name`` without a model (a version whose files are gone): registered from an
    empty run, then deleted at once (MLflow never reuses a number). Returns the number taken."""
    import mlflow

    experiment = registry.experiment_id(platform)
    with mlflow.start_run(experiment_id=experiment, run_name=f"placeholder {name}") as run:
        mlflow.set_tag("pmdb.placeholder", "a version number kept for a version whose model files are gone")
    version = int(registry.client.create_model_version(name, f"runs:/{run.info.run_id}/model",
                                                       run_id=run.info.run_id).version)
    registry.client.delete_model_version(name, str(version))
    registry.client.delete_run(run.info.run_id)
    return version


def _repair_champions(store: Store, workspace: Workspace, registry: Registry) -> list[str]:
    """MLflow's champion of each name set to the store's (predict uses the store's); removed where the store has
    none."""
    from fitters.registry import CHAMPION

    cmp = compare(store, workspace)
    for name, ours, _ in cmp.champions:
        if ours is None:
            registry.client.delete_registered_model_alias(name, CHAMPION)
        else:
            registry.client.set_registered_model_alias(name, CHAMPION, str(ours))
    return [f"set {len(cmp.champions)} MLflow champions to the store's"] if cmp.champions else []


def _tag_unmirrored(store: Store, workspace: Workspace, registry: Registry) -> list[str]:
    """MLflow versions of this store's fits that never reached the store (a fit that died between the two): tagged,
    so they are known; they are not used."""
    cmp = compare(store, workspace)
    for name, version in cmp.unmirrored:
        registry.client.set_model_version_tag(name, str(version), UNMIRRORED_TAG,
                                              "registered by a fit that ended before the store mirrored it")
    return [f"tagged {len(cmp.unmirrored)} MLflow versions the store never mirrored ({UNMIRRORED_TAG})"] \
        if cmp.unmirrored else []
