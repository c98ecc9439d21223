"""Embedding-lookup family ``embedding_linear``: op time as a non-negative sum of work counts over the op's tables.

    t (µs) = c0 + c_T·T + c_N·Σ N_t + c_ND·Σ N_t·D_t + c_UD·Σ U_t·D_t + c_BD·Σ B·D_t

with N_t = B·L_t the lookups of table t, U_t the unique rows it touches (estimated from its reuse factors:
N_t / mean lookups per unique row) and D_t its dimension. Every term is work a lookup does (gather N·D elements,
fetch U·D of them from memory, write B·D outputs; the backward's fused optimizer updates U·D), so the sum is additive
over tables — what comparing sharding plans needs — and extrapolates linearly to tables and batches beyond the
measured ones, where the DeepSets model (``embedding_mlp``) may not. The coefficients are fitted by non-negative
least squares on relative error (rows weighted 1/t). Same input columns as ``embedding_mlp``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from fitters import features as feats
from fitters.model import Model, TrainingSet

TERMS = ("const", "tables", "lookups", "lookup_elements", "unique_elements", "output_elements")
# mean lookups per unique row in each reuse-factor bin (bins (0,1], (1,2], (2,4], ... > 2^15: collectors.embedding.reuse)
_BIN_MEAN = np.array([1.0, 2.0] + [1.5 * 2.0 ** (k - 1) for k in range(2, feats.NUM_REUSE_BINS - 1)]
                     + [2.0 ** (feats.NUM_REUSE_BINS - 2) * 1.5])


def work_terms(frame: pd.DataFrame) -> np.ndarray:
    """[n, len(TERMS)] work counts of each op instance (rows of :data:`fitters.features.EMBEDDING_COLUMNS`)."""
    tables, mask = feats.embedding_tables(frame)
    batch, pooling, dim = (np.exp(tables[..., i].astype(float)) for i in (0, 2, 3))
    lookups = batch * pooling * mask
    per_unique = (tables[..., 4:].astype(float) * _BIN_MEAN).sum(axis=-1)
    unique = np.where(per_unique > 0, lookups / np.maximum(per_unique, 1.0), lookups)
    return np.column_stack([np.ones(len(frame)), mask.sum(axis=1), lookups.sum(axis=1),
                            (lookups * dim).sum(axis=1), (unique * dim).sum(axis=1), (batch * dim * mask).sum(axis=1)])


class EmbeddingLinearModel(Model):
    family = "embedding_linear"

    def __init__(self, op: str, pass_: str, coef: list[float], scale: list[float]):
        self.op, self.pass_ = op, pass_
        self.coef, self.scale = np.asarray(coef, dtype=float), np.asarray(scale, dtype=float)

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return np.maximum(work_terms(frame) / self.scale @ self.coef, 1e-3)

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "pass": self.pass_, "coef": self.coef.tolist(), "scale": self.scale.tolist(),
                "us_per_unit": dict(zip(TERMS, (self.coef / self.scale).tolist())),
                "features": {"terms": list(TERMS), "input_columns": list(feats.EMBEDDING_COLUMNS),
                             "aggregation": "sum over tables"}}

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "EmbeddingLinearModel":
        return cls(config["op"], config["pass"], config["coef"], config["scale"])


def fit(training: TrainingSet, seed: int = 0) -> EmbeddingLinearModel:
    """Non-negative least squares of the work terms on relative error (deterministic; ``seed`` is unused)."""
    terms = work_terms(training.params)
    scale = np.maximum(terms.max(axis=0), 1e-12)      # columns of comparable size for the solver
    times = np.asarray(training.times_us, dtype=float)
    weight = 1.0 / np.maximum(times, 1e-3)
    coef, _ = nnls(terms / scale * weight[:, None], times * weight)
    return EmbeddingLinearModel(training.op, training.pass_, coef.tolist(), scale.tolist())
