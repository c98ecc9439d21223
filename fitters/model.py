"""What every fitted model is: batch prediction in µs, a JSON description, and a directory it saves to and loads from.

A saved model is a directory with ``model.json`` (family, feature spec, fitted parameters) and, for families with
weights, one more file: ``state.pt`` (a torch state dict, loaded with ``weights_only=True``) or ``model.skops``
(scikit-learn, loaded by skops with an explicit allow-list). Nothing is unpickled as an arbitrary object.
"""
from __future__ import annotations

import importlib
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from pmdb.errors import PmdbError

MODEL_FILE = "model.json"
FORMAT_VERSION = 1
# family -> "module:Class"
FAMILIES = {
    "roofline": "fitters.roofline:RooflineModel",
    "mlp": "fitters.mlp:MLPModel",
    "gbdt": "fitters.gbdt:GBDTModel",
    "embedding_mlp": "fitters.embedding:EmbeddingModel",
    "embedding_linear": "fitters.embedding_linear:EmbeddingLinearModel",
    "sigmoid": "fitters.collective:CollectiveModel",
    "in_context": "fitters.collective_context:InContextCollectiveModel",
    "cross_gpu": "fitters.cross_gpu:CrossGpuModel",
    "gemm_shapes": "fitters.gemm_shapes:GemmShapesModel",
}


@dataclass(frozen=True)
class TrainConfig:
    """Search and training limits of the learned families (tests use tiny ones)."""

    max_trials: int = 8
    max_epochs: int = 2000
    patience: int = 150            # epochs without validation improvement before stopping
    batch_size: int = 2048         # rows per step; smaller sets train full-batch
    min_epochs: int = 30           # trained even when the budget is already spent
    loss: str = "huber"            # "huber" (robust to outlier timings) or "mse" (the paper)

    def trials_for(self, rows: int) -> int:
        """Candidates worth trying on ``rows`` training rows: a validation part of a few rows cannot tell eight
        configurations apart, so small sets try fewer (2 below 50 rows, 4 below 200)."""
        return min(self.max_trials, 2 if rows < 50 else 4 if rows < 200 else self.max_trials)


@dataclass
class TrainingSet:
    """The training side of one (op, pass, implementation, dtype, cache state) group.

    ``params`` has one column per op parameter (kernel ops) or the embedding list columns
    (:data:`fitters.features.EMBEDDING_COLUMNS`); ``times_us`` are the measured medians; ``groups`` the configuration
    keys (rows of one configuration stay together in inner validation splits); ``peaks`` the platform's measured peaks
    (``gemm_flops`` in FLOP/s, ``mem_bw`` in bytes/s) when known.
    """

    op: str
    pass_: str
    dtype: str
    params: pd.DataFrame
    times_us: np.ndarray
    groups: np.ndarray
    peaks: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.times_us)


class Model(ABC):
    """A fitted model: ``predict(frame) -> µs`` for many rows per call."""

    family: ClassVar[str]

    @abstractmethod
    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        """Predicted time in µs of each row of ``frame`` (columns documented by the family)."""

    @abstractmethod
    def config(self) -> dict[str, Any]:
        """Everything needed to rebuild the model except weights: JSON-ready."""

    def describe(self) -> dict[str, Any]:
        """Hyperparameters and fitted parameters worth showing (MLflow params, ``model_versions.params``)."""
        return {k: v for k, v in self.config().items() if k != "features"}

    def features(self) -> dict[str, Any]:
        """The feature spec (``model_versions.features``)."""
        return self.config().get("features", {})

    def search_record(self) -> dict[str, Any]:
        """The record of the hyperparameter search that chose this model ({} for families without one)."""
        return {}

    @property
    def budget_hit(self) -> bool:
        """Whether the wall-clock cap cut the search short (then not reproducible from data and seed)."""
        return bool(self.search_record().get("budget_hit", False))

    def save_weights(self, directory: Path) -> None:
        """Write weight files beside model.json (families with weights override this)."""

    def keep_weight_files(self) -> None:
        """Serialise the weights now and keep the files' bytes with the model, for :meth:`save` to write: a fit's
        worker process does this after its search, so the registering process only writes bytes (a GBDT's skops
        file took ~0.3 s to write, a quarter of the registering process's time per version)."""
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            self.save_weights(Path(tmp))
            self._weight_files = {path.relative_to(tmp).as_posix(): path.read_bytes()
                                  for path in sorted(Path(tmp).rglob("*")) if path.is_file()}

    @classmethod
    @abstractmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "Model":
        """Rebuild from ``config()`` and the weight files in ``directory``."""

    def save(self, directory: Path) -> Path:
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        payload = {"family": self.family, "format_version": FORMAT_VERSION, "config": self.config()}
        (directory / MODEL_FILE).write_text(json.dumps(payload, indent=1, sort_keys=True, default=_json_number))
        kept: dict[str, bytes] | None = getattr(self, "_weight_files", None)
        if kept is None:
            self.save_weights(directory)
            return directory
        for name, content in kept.items():
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
        return directory


def _json_number(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def family_class(family: str) -> type[Model]:
    if family not in FAMILIES:
        raise PmdbError(f"unknown model family {family!r} (known: {', '.join(FAMILIES)})")
    module, name = FAMILIES[family].split(":")
    return getattr(importlib.import_module(module), name)


def load_dir(directory: str | Path) -> Model:
    """Load a model saved by :meth:`Model.save`."""
    directory = Path(directory)
    path = directory / MODEL_FILE
    if not path.is_file():
        raise PmdbError(f"no {MODEL_FILE} in {directory}: not a pmdb model directory")
    payload = json.loads(path.read_text())
    if payload.get("format_version") != FORMAT_VERSION:
        raise PmdbError(f"model in {directory} has format version {payload.get('format_version')}, "
                        f"this pmdb reads {FORMAT_VERSION}")
    return family_class(payload["family"]).from_saved(payload["config"], directory)
