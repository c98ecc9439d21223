"""The MLflow pyfunc face of a pmdb model: ``mlflow.pyfunc.load_model("models:/NAME@champion").predict(frame)``
returns µs for every row, reading only the logged model directory (no training data, no pickled objects: the
wrapper is logged as code, see :mod:`fitters.pyfunc_entry`)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel, PythonModelContext

from fitters.model import Model, load_dir

ARTIFACT_KEY = "model"


class PmdbPyfunc(PythonModel):
    """Loads the saved pmdb model from the ``model`` artifact and predicts in batch."""

    model: Model

    def load_context(self, context: PythonModelContext) -> None:
        self.model = load_dir(context.artifacts[ARTIFACT_KEY])

    def predict(self, context: PythonModelContext, model_input: pd.DataFrame,
                params: dict[str, Any] | None = None) -> np.ndarray:
        return self.model.predict(pd.DataFrame(model_input))
