"""Training loop and seeded, time-budgeted hyperparameter search shared by the MLP and DeepSets families.

Targets are standardised ln(µs); the loss is MSE (the paper) or Huber (default: timing data has outliers, e.g. a
repetition slowed by another process); the optimiser Adam (weight decay 1e-4, as in the paper) with the learning rate
halved on plateaus. Validation is scored like the reported metric: the geometric mean of |error| (standardised ln
units), and early stopping keeps the weights of the best score. Candidates are tried
in a seeded order (the first is a sensible default) until ``max_trials`` or the time budget is spent; the budget
is checked between epochs, so a trial never runs far past it.
"""
from __future__ import annotations

import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from fitters.model import TrainConfig

WEIGHT_DECAY = 1e-4
HUBER_DELTA = 0.1      # standardised ln units: beyond this a residual counts linearly, not squared


def geometric_abs_error(predicted: torch.Tensor, target: torch.Tensor) -> float:
    """exp(mean(ln(|predicted - target| + 1e-4))): the GMAE analogue on standardised ln-times."""
    return float(torch.exp(torch.log((predicted - target).abs() + 1e-4).mean()))


@dataclass
class TrialResult:
    """One tried candidate: its hyperparameters, best validation score (geometric mean |error|, standardised ln
    units) and epochs run."""

    hyper: dict[str, Any]
    val_loss: float
    best_epoch: int
    epochs: int
    seconds: float
    state: dict[str, torch.Tensor] = field(repr=False, default_factory=dict)


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Small networks train fastest on one thread (and leave the other cores alone)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def candidates(grid: dict[str, Sequence[Any]], first: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """``first``, then every other grid point in a seeded random order."""
    keys = list(grid)
    points = [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]
    points = [p for p in points if p != first]
    order = np.random.default_rng(seed).permutation(len(points))
    return [first] + [points[i] for i in order]


def xavier_init(module: nn.Module) -> None:
    for layer in module.modules():
        if isinstance(layer, nn.Linear):
            nn.init.xavier_uniform_(layer.weight)
            nn.init.zeros_(layer.bias)


def mlp_stack(n_in: int, width: int, depth: int, n_out: int = 1) -> nn.Sequential:
    """``depth`` blocks of Linear + ReLU, then a Linear to ``n_out`` outputs."""
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(n_in if i == 0 else width, width), nn.ReLU()]
    layers.append(nn.Linear(width if depth else n_in, n_out))
    return nn.Sequential(*layers)


def train(module: nn.Module, fit_inputs: tuple[torch.Tensor, ...], fit_y: torch.Tensor,
          val_inputs: tuple[torch.Tensor, ...], val_y: torch.Tensor, lr: float, config: TrainConfig,
          seed: int, deadline: float) -> TrialResult:
    """Train ``module`` (called as ``module(*inputs) -> [n]``) and keep the best-validation weights."""
    generator = torch.Generator().manual_seed(seed)
    optimiser = torch.optim.Adam(module.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=0.5, patience=max(config.patience // 3, 5))
    loss_fn = nn.HuberLoss(delta=HUBER_DELTA) if config.loss == "huber" else nn.MSELoss()
    n = fit_y.shape[0]
    best = (float("inf"), 0, {k: v.detach().clone() for k, v in module.state_dict().items()})
    start = time.monotonic()
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        module.train()
        order = torch.randperm(n, generator=generator) if n > config.batch_size else None
        for begin in range(0, n, config.batch_size):
            index = order[begin:begin + config.batch_size] if order is not None else slice(None)
            optimiser.zero_grad()
            loss = loss_fn(module(*(x[index] for x in fit_inputs)), fit_y[index])
            loss.backward()
            optimiser.step()
        module.eval()
        with torch.no_grad():
            val_loss = geometric_abs_error(module(*val_inputs), val_y) if val_y.numel() else float(loss)
        scheduler.step(val_loss)
        if val_loss < best[0]:
            best = (val_loss, epoch, {k: v.detach().clone() for k, v in module.state_dict().items()})
        if epoch - best[1] >= config.patience or (epoch >= config.min_epochs and time.monotonic() > deadline):
            break
    return TrialResult({}, best[0], best[1], epoch, time.monotonic() - start, best[2])


def search(build: Callable[[dict[str, Any]], nn.Module], points: list[dict[str, Any]],
           fit_inputs: tuple[torch.Tensor, ...], fit_y: torch.Tensor, val_inputs: tuple[torch.Tensor, ...],
           val_y: torch.Tensor, config: TrainConfig, seed: int, budget_s: float) -> tuple[TrialResult, list[TrialResult]]:
    """Try candidates in order within the budget; returns (best trial, all trials)."""
    deadline = time.monotonic() + budget_s
    trials: list[TrialResult] = []
    for i, hyper in enumerate(points[:config.trials_for(int(fit_y.shape[0] + val_y.shape[0]))]):
        if trials and time.monotonic() > deadline:
            break
        torch.manual_seed(seed + i)
        module = build(hyper)
        result = train(module, fit_inputs, fit_y, val_inputs, val_y, hyper["lr"], config, seed + i, deadline)
        result.hyper = hyper
        trials.append(result)
    best = min(trials, key=lambda t: t.val_loss)
    return best, trials


@dataclass(frozen=True)
class Standardiser:
    """Per-column mean and std (std 0 -> 1) of training values; JSON-ready."""

    mean: list[float]
    std: list[float]

    @classmethod
    def of(cls, values: np.ndarray, axis: int | tuple[int, ...] = 0) -> "Standardiser":
        mean = np.asarray(values.mean(axis=axis), dtype=float).reshape(-1)
        std = np.asarray(values.std(axis=axis), dtype=float).reshape(-1)
        return cls(mean.tolist(), np.where(std > 1e-12, std, 1.0).tolist())

    def apply(self, values: np.ndarray) -> np.ndarray:
        return (values - np.asarray(self.mean)) / np.asarray(self.std)

    def invert(self, values: np.ndarray) -> np.ndarray:
        return values * np.asarray(self.std) + np.asarray(self.mean)


def fit_selected(build: Callable[[dict[str, Any]], nn.Module], points: list[dict[str, Any]],
                 inputs: tuple[torch.Tensor, ...], y: torch.Tensor, fit_rows: np.ndarray, val_rows: np.ndarray,
                 config: TrainConfig, seed: int, budget_s: float) -> tuple[dict[str, Any], dict[str, torch.Tensor],
                                                                            dict[str, Any]]:
    """Search on (fit rows, validation rows), then retrain the best candidate on all rows for its best epoch count
    when the remaining budget allows. Returns (chosen hyperparameters, weights, search record)."""
    started = time.monotonic()
    with torch_threads(1):
        best, trials = search(build, points, tuple(x[fit_rows] for x in inputs), y[fit_rows],
                              tuple(x[val_rows] for x in inputs), y[val_rows], config, seed, budget_s)
        state, refit = best.state, False
        if budget_s - (time.monotonic() - started) > best.seconds * best.best_epoch / max(best.epochs, 1):
            torch.manual_seed(seed)
            final = train(build(best.hyper), inputs, y, tuple(x[:0] for x in inputs), y[:0], best.hyper["lr"],
                          TrainConfig(max_epochs=max(best.best_epoch, 1), patience=10**9, min_epochs=1,
                                      batch_size=config.batch_size), seed, float("inf"))
            state, refit = final.state, True
    record = {"loss": config.loss, "trials": [{**t.hyper, "val_score": round(t.val_loss, 6), "best_epoch": t.best_epoch,
                          "seconds": round(t.seconds, 2)} for t in trials],
              "refit": refit, "validation_rows": int(len(val_rows))}
    return best.hyper, state, record
