"""Workspace layout: where the DuckDB store, the MLflow store and the artifacts live."""
from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from pathlib import Path

from pmdb.errors import PmdbError

DEFAULT_HOME = "pmdb-workspace"
HOME_ENV = "PMDB_HOME"
TRACKING_ENV = "MLFLOW_TRACKING_URI"  # a shared MLflow tracking server (or any MLflow URI) instead of mlflow.db


@dataclass(frozen=True)
class Workspace:
    """A workspace directory: ``pmdb.duckdb``, ``mlflow.db`` and ``artifacts/`` (MLflow artifacts, traces by sha256).
    ``tracking_uri`` (else $MLFLOW_TRACKING_URI) points the MLflow registry elsewhere, e.g. a shared server."""

    home: Path
    tracking_uri: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "home", Path(self.home))

    @property
    def db_path(self) -> Path:
        return self.home / "pmdb.duckdb"

    @property
    def mlflow_db(self) -> Path:
        return self.home / "mlflow.db"

    @property
    def mlflow_uri(self) -> str:
        """The MLflow tracking and registry URI: ``tracking_uri``, else $MLFLOW_TRACKING_URI, else mlflow.db."""
        return self.tracking_uri or os.environ.get(TRACKING_ENV) or self.local_mlflow_uri

    @property
    def local_mlflow_uri(self) -> str:
        """The workspace's own sqlite MLflow store (mlflow.db)."""
        return f"sqlite:///{self.mlflow_db.resolve()}"

    @property
    def artifacts(self) -> Path:
        return self.home / "artifacts"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.artifacts / "mlflow"

    @property
    def traces_dir(self) -> Path:
        return self.artifacts / "traces"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    def exists(self) -> bool:
        return self.db_path.is_file()

    def require(self) -> "Workspace":
        """Return self, or raise a one-line error telling how to create the workspace."""
        if not self.exists():
            raise PmdbError(f"no pmdb workspace at {self.home} (create it with `{init_command(self.home)}`, "
                            f"or point {HOME_ENV}/--home at an existing one)")
        return self

    def create_dirs(self) -> None:
        if self.home.exists() and not self.home.is_dir():
            raise PmdbError(f"{self.home} exists and is not a directory")
        for path in (self.home, self.artifacts, self.mlflow_artifacts, self.traces_dir):
            path.mkdir(parents=True, exist_ok=True)


def init_command(home: Path) -> str:
    """The command that creates a workspace at ``home`` (``--home`` is an option of ``pmdb`` itself, so it comes
    before the command name)."""
    return f"pmdb --home {shlex.quote(str(home))} init"


def resolve_workspace(home: str | os.PathLike | None = None, tracking_uri: str | None = None) -> Workspace:
    """``--home`` wins, then ``$PMDB_HOME``, then ``./pmdb-workspace``; ``tracking_uri`` (``--tracking-uri``)
    overrides $MLFLOW_TRACKING_URI and the workspace's mlflow.db."""
    chosen = home or os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Workspace(Path(chosen).expanduser().absolute(), tracking_uri or None)
