"""Workspace layout: where the DuckDB store, the MLflow store and the artifacts live."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pmdb.errors import PmdbError

DEFAULT_HOME = "pmdb-workspace"
HOME_ENV = "PMDB_HOME"


@dataclass(frozen=True)
class Workspace:
    """A workspace directory: ``pmdb.duckdb``, ``mlflow.db`` and ``artifacts/`` (MLflow artifacts, traces by sha256)."""

    home: Path

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
            raise PmdbError(f"no pmdb workspace at {self.home} (create it with `pmdb init --home {self.home}`, "
                            f"or point {HOME_ENV}/--home at an existing one)")
        return self

    def create_dirs(self) -> None:
        if self.home.exists() and not self.home.is_dir():
            raise PmdbError(f"{self.home} exists and is not a directory")
        for path in (self.home, self.artifacts, self.mlflow_artifacts, self.traces_dir):
            path.mkdir(parents=True, exist_ok=True)


def resolve_workspace(home: str | os.PathLike | None = None) -> Workspace:
    """``--home`` wins, then ``$PMDB_HOME``, then ``./pmdb-workspace``."""
    chosen = home or os.environ.get(HOME_ENV) or DEFAULT_HOME
    return Workspace(Path(chosen).expanduser().absolute())
