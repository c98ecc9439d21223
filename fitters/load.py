"""Loading API for the simulator and the planner: pick model versions from the store's mirror, load them from the
MLflow registry, predict in batch (µs) without touching training data.

    refs = select_models(store, platform)                        # champions (alias) of every op/collective
    gemm = next(r for r in refs if r.op == "fully_connected" and r.pass_ == "fwd" and r.cache_state == "cold")
    model = load_model(store.workspace, gemm.name, gemm.version)
    model.predict(pd.DataFrame({"M": m, "N": n, "K": k}))         # one call for many rows

Kernel models take the op's parameter columns (as in ``op_measurements.params``; parameters that were constant in
training, e.g. B = 1 for fully_connected, may be left out); embedding models the list columns of
:data:`fitters.features.EMBEDDING_COLUMNS` (one row per op instance); collective models a ``max_rank_bytes`` column.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import pandas as pd

from fitters.model import MODEL_FILE, Model, load_dir
from fitters.registry import CHAMPION, MODEL_DIR, Registry, cache_root, known_name
from fitters.registry_mirror import require_usable
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store


@dataclass(frozen=True)
class ModelRef:
    """One registered version and what it models."""

    name: str
    version: int
    op: str
    pass_: str | None
    family: str
    cache_state: str | None
    implementation: str | None
    world_size: int | None
    dtype: str | None = None

    @property
    def is_collective(self) -> bool:
        return self.world_size is not None


def _refs(frame: pd.DataFrame) -> list[ModelRef]:
    def clean(value: object) -> object:
        return None if pd.isna(value) else value

    return [ModelRef(r.name, int(r.version), r.op, clean(r.pass_), r.family, clean(r.cache_state),
                     clean(r.implementation), None if pd.isna(r.world_size) else int(r.world_size), clean(r.dtype))
            for r in frame.rename(columns={"pass": "pass_"}).itertuples(index=False)]


_COLUMNS = "m.name, m.version, m.op, m.pass, m.family, m.cache_state, m.implementation, m.world_size, m.dtype"


def select_models(store: Store, platform: str, alias: str = CHAMPION, *, versions: Mapping[str, int] | None = None,
                  cache_state: str | None = None) -> list[ModelRef]:
    """The versions an alias points at on ``platform`` (default ``champion``; ``latest`` works too), or the explicit
    ``versions`` {name: version}. ``cache_state`` keeps kernel models fitted on that cache state (collectives stay)."""
    if versions:  # a user's names in either form (readable or legacy pmdb.<platform>.*) as the mirror holds them
        versions = {known_name(store, name): int(v) for name, v in versions.items()}
    require_usable(store, platform, alias, versions)  # the registry holds the mirror; no version asked for is lost
    if versions:
        pairs = pd.DataFrame({"name": list(versions), "version": [int(v) for v in versions.values()]})
        store.conn.register("_pmdb_wanted", pairs)
        try:
            frame = store.query(f"SELECT {_COLUMNS} FROM model_versions m JOIN _pmdb_wanted w USING (name, version) "
                                "WHERE m.platform = ? ORDER BY m.name", [platform])
        finally:
            store.conn.unregister("_pmdb_wanted")
        missing = set(versions) - set(frame["name"])
        if missing:
            raise PmdbError(f"no such model versions on {platform}: "
                            + ", ".join(f"{n}:{versions[n]}" for n in sorted(missing)))
    else:
        frame = store.query(f"SELECT {_COLUMNS} FROM model_versions m JOIN model_aliases a "
                            "ON a.name = m.name AND a.version = m.version "
                            "WHERE m.platform = ? AND a.alias = ? ORDER BY m.name", [platform, alias])
    if cache_state is not None:
        frame = frame[frame["cache_state"].isna() | (frame["cache_state"] == cache_state)]
    return _refs(frame)


def cached_dir(workspace: Workspace, name: str, version: int) -> Path:
    """The model directory inside :func:`fitters.registry.cache_root` (the local copy of a fetched version)."""
    return cache_root(workspace, name, version) / "artifacts" / MODEL_DIR


@lru_cache(maxsize=256)
def _load(uri: str, home: str, name: str, version: int) -> Model:
    """Load one version: from the workspace's local copy when there is one (no MLflow client, no mlflow import),
    else through the registry, which fetches it into that copy."""
    local = cached_dir(Workspace(home), name, version)
    if (local / MODEL_FILE).is_file():
        return load_dir(local)
    return load_dir(Registry(Workspace(home, uri)).download(name, version))


def load_model(workspace: Workspace, name: str, version: int | str) -> Model:
    """The model of ``name`` at a version number or an alias (``champion``, ``latest``); the registry resolves
    aliases, and each version is loaded once per process (from the workspace's local copy once it has one)."""
    text = str(version)
    number = int(text) if text.isdigit() else Registry(workspace).resolve_version(name, text)
    return _load(workspace.mlflow_uri, str(workspace.home), name, number)
