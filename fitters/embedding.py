"""Embedding-lookup family (DeepSets, method.md section 3): each table's 21-vector [ln B, ln E, ln L, ln D, 17 reuse
factors] goes through shared layers (phi), the per-table outputs are summed over the op's tables, and further layers
(rho) predict ln(op time). One model per op, pass and implementation (forward and backward separately).

``predict`` takes one row per op instance with the list columns of :data:`fitters.features.EMBEDDING_COLUMNS`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import nn

from fitters import features as feats
from fitters.model import Model, TrainingSet
from fitters.selection import inner_split, ln_gmae
from fitters.torch_train import (DEFAULT_CONFIG, Standardiser, TrainConfig, candidates, fit_selected, mlp_stack,
                                  xavier_init)

POOLS = ("sum", "lse")
GRID = {"pool": POOLS, "width": (32, 64, 128, 256), "depth": (2, 3, 4), "lr": (1e-3, 3e-3, 1e-2)}
FIRST = {"pool": "lse", "width": 64, "depth": 2, "lr": 3e-3}
HYPER = ("pool", "width", "depth", "lr")
SCALED = 4  # the first four table features (logs) are standardised; reuse factors are shares in [0, 1] already
STATE_FILE = "state.pt"


class DeepSets(nn.Module):
    """phi (``depth`` blocks, per table) -> pooling over the op's tables -> rho (``depth`` - 1 blocks) -> ln-time.

    Pooling ``sum`` is the paper's; ``lse`` (log-sum-exp per channel) lets phi speak in log-time, so per-table times
    that add up in linear time add up exactly. The search tries both and validation decides.
    """

    def __init__(self, width: int, depth: int, pool: str = "sum"):
        super().__init__()
        if pool not in POOLS:
            raise ValueError(f"pool must be one of {POOLS}")
        self.pool = pool
        self.phi = mlp_stack(len(feats.TABLE_FEATURES), width, depth, n_out=width)
        self.rho = mlp_stack(width, width, max(depth - 1, 1))

    def forward(self, tables: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        per_table = self.phi(tables)
        if self.pool == "sum":
            pooled = (per_table * mask.unsqueeze(-1)).sum(dim=1)
        else:
            pooled = torch.logsumexp(per_table.masked_fill(mask.unsqueeze(-1) == 0, float("-inf")), dim=1)
        return self.rho(pooled).squeeze(-1)


class EmbeddingModel(Model):
    family = "embedding_mlp"

    def __init__(self, op: str, pass_: str, t_scale: Standardiser, y_scale: Standardiser, hyper: dict[str, Any],
                 state: dict[str, torch.Tensor], info: dict[str, Any]):
        self.op, self.pass_, self.t_scale, self.y_scale, self.hyper, self.info = op, pass_, t_scale, y_scale, hyper, info
        self.net = DeepSets(hyper["width"], hyper["depth"], hyper["pool"])
        self.net.load_state_dict(state)
        self.net.eval()

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        tables, mask = _scaled(self.t_scale, *feats.embedding_tables(frame))
        with torch.no_grad():
            out = self.net(torch.as_tensor(tables), torch.as_tensor(mask)).double().numpy()
        return np.exp(self.y_scale.invert(out))

    def config(self) -> dict[str, Any]:
        return {"op": self.op, "pass": self.pass_, "t_scale": vars(self.t_scale), "y_scale": vars(self.y_scale),
                **{k: self.hyper[k] for k in HYPER}, "search": self.info, "budget_hit": self.budget_hit,
                "features": {"per_table": list(feats.TABLE_FEATURES), "input_columns": list(feats.EMBEDDING_COLUMNS),
                             "aggregation": "sum over tables"}}

    def search_record(self) -> dict[str, Any]:
        return self.info

    def save_weights(self, directory: Path) -> None:
        torch.save(self.net.state_dict(), directory / STATE_FILE)

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "EmbeddingModel":
        state = torch.load(directory / STATE_FILE, weights_only=True)
        return cls(config["op"], config["pass"], Standardiser(**config["t_scale"]), Standardiser(**config["y_scale"]),
                   {k: config[k] for k in HYPER}, state, config["search"])


def _scaled(t_scale: Standardiser, tables: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = tables.copy()
    out[..., :SCALED] = t_scale.apply(out[..., :SCALED]) * mask[..., None]
    return out.astype(np.float32), mask


def fit(training: TrainingSet, seed: int = 0, budget_s: float = float("inf"),
        config: TrainConfig = DEFAULT_CONFIG) -> EmbeddingModel:
    """Seeded search of ``config``'s counted work, selection on validation, refit on all training rows; ``budget_s``
    (s) is only a safety cap (the model's ``budget_hit`` says when it cut the work short)."""
    tables, mask = feats.embedding_tables(training.params)
    present = mask.astype(bool)
    t_scale = Standardiser.of(tables[present][:, :SCALED])
    tables, mask = _scaled(t_scale, tables, mask)
    y_all = feats.log_target(training.times_us)
    y_scale = Standardiser.of(y_all)
    t, m = torch.as_tensor(tables), torch.as_tensor(mask)
    y = torch.as_tensor(y_scale.apply(y_all), dtype=torch.float32)
    inner = inner_split(training.groups, seed)

    def build(hyper: dict[str, Any]) -> nn.Module:
        net = DeepSets(hyper["width"], hyper["depth"], hyper["pool"])
        xavier_init(net)
        return net

    hyper, state, info = fit_selected(build, candidates(GRID, FIRST, seed), (t, m), y, inner.train, inner.test,
                                      config, seed, budget_s,
                                      score=lambda pred, meas: ln_gmae(y_scale.invert(pred), y_scale.invert(meas)))
    info["max_tables"] = int(mask.shape[1])
    return EmbeddingModel(training.op, training.pass_, t_scale, y_scale, hyper, state, info)
