"""MLP family (the paper's kernel model): log features, log target, ReLU MLP, Adam, MSE, a seeded search over width,
depth and learning rate bounded by counted work (``TrainConfig``: candidates, epochs per candidate), model selection
on a validation part of the training rows (:mod:`fitters.torch_train`).

The chosen configuration is retrained on all training rows for the number of epochs that was best on validation
(``refit`` in the description says whether that happened: not when the wall-clock safety cap was hit, which
``budget_hit`` records).
A forward GEMM model (fully_connected, bmm) keeps its trained range and prices GEMMs beyond it by waves
(:func:`fitters.gemm_shapes.scaled_forward`), where the network saturates.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from fitters import features as feats, gemm_shapes
from fitters.model import Model, TrainingSet
from fitters.selection import inner_split, ln_gmae
from fitters.torch_train import (DEFAULT_CONFIG, Standardiser, TrainConfig, candidates, fit_selected, mlp_stack,
                                  xavier_init)

GRID = {"width": (64, 128, 256, 512), "depth": (2, 3, 4, 5), "lr": (1e-3, 3e-3, 1e-2)}
FIRST = {"width": 128, "depth": 3, "lr": 3e-3}
STATE_FILE = "state.pt"


class MLPModel(Model):
    """``predict`` takes a frame with the op's parameter columns (see the feature spec)."""

    family = "mlp"

    def __init__(self, spec: feats.FeatureSpec, x_scale: Standardiser, y_scale: Standardiser, hyper: dict[str, Any],
                 state: dict[str, torch.Tensor], search_info: dict[str, Any],
                 gemm_bounds: dict[str, float] | None = None):
        self.spec, self.x_scale, self.y_scale, self.hyper = spec, x_scale, y_scale, hyper
        self.gemm_bounds = gemm_bounds   # a forward GEMM's trained range: beyond it, waves (gemm_shapes)
        self.search_info = search_info
        self.net = mlp_stack(len(spec.names), hyper["width"], hyper["depth"])
        self.net.load_state_dict(state)
        self.net.eval()

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return gemm_shapes.scaled_forward(self._predict, self.spec.op, frame, self.gemm_bounds)

    def _predict(self, frame: pd.DataFrame) -> np.ndarray:
        x = self.x_scale.apply(feats.transform(self.spec, frame))
        with torch.no_grad():
            out = self.net(torch.as_tensor(x, dtype=torch.float32)).squeeze(-1).double().numpy()
        return np.exp(self.y_scale.invert(out))

    def config(self) -> dict[str, Any]:
        return {"features": self.spec.to_dict(), "x_scale": vars(self.x_scale), "y_scale": vars(self.y_scale),
                **{k: self.hyper[k] for k in ("width", "depth", "lr")}, "search": self.search_info,
                "gemm_bounds": self.gemm_bounds, "budget_hit": self.budget_hit}

    def search_record(self) -> dict[str, Any]:
        return self.search_info

    def save_weights(self, directory: Path) -> None:
        torch.save(self.net.state_dict(), directory / STATE_FILE)

    @classmethod
    def from_saved(cls, config: dict[str, Any], directory: Path) -> "MLPModel":
        state = torch.load(directory / STATE_FILE, weights_only=True)
        hyper = {k: config[k] for k in ("width", "depth", "lr")}
        return cls(feats.FeatureSpec.from_dict(config["features"]), Standardiser(**config["x_scale"]),
                   Standardiser(**config["y_scale"]), hyper, state, config["search"], config.get("gemm_bounds"))


def fit(training: TrainingSet, seed: int = 0, budget_s: float = float("inf"),
        config: TrainConfig = DEFAULT_CONFIG) -> MLPModel:
    """Search (``config``'s counted work), select on validation, refit on all training rows; ``budget_s`` (s) is
    only a safety cap (the model's ``budget_hit`` says when it cut the work short)."""
    spec = feats.build_spec(training.op, training.pass_, training.dtype, training.params)
    x_all = feats.transform(spec, training.params)
    y_all = feats.log_target(training.times_us)
    x_scale, y_scale = Standardiser.of(x_all), Standardiser.of(y_all)
    x = torch.as_tensor(x_scale.apply(x_all), dtype=torch.float32)
    y = torch.as_tensor(y_scale.apply(y_all), dtype=torch.float32)
    inner = inner_split(training.groups, seed)
    n_in = x.shape[1]

    def build(hyper: dict[str, Any]) -> torch.nn.Module:
        net = mlp_stack(n_in, hyper["width"], hyper["depth"])
        xavier_init(net)
        return _Squeeze(net)

    hyper, state, info = fit_selected(build, candidates(GRID, FIRST, seed), (x,), y, inner.train, inner.test,
                                      config, seed, budget_s,
                                      score=lambda pred, meas: ln_gmae(y_scale.invert(pred), y_scale.invert(meas)))
    return MLPModel(spec, x_scale, y_scale, hyper, _unwrap(state), info,
                    gemm_shapes.forward_bounds(training.op, training.pass_, training.params))


class _Squeeze(torch.nn.Module):
    """Wraps a network so it returns shape [n] (the training loop compares with a 1-D target)."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1)


def _unwrap(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k.removeprefix("net."): v for k, v in state.items()}
