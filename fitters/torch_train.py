"""Training loop and seeded hyperparameter search, bounded by counted work, shared by the MLP and DeepSets families.

Targets are standardised ln(µs); the loss is MSE (the paper) or Huber (default: timing data has outliers, e.g. a
repetition slowed by another process); the optimiser Adam (weight decay 1e-4, as in the paper) with the learning rate
halved on plateaus. Validation is scored like the reported metric: the geometric mean of |error| (standardised ln
units), and early stopping keeps the weights of the best score.

The work is counted, so a fit is a function of its data and seed only: ``TrainConfig.trials_for(rows)`` candidates
are tried in a seeded order (the first is a sensible default), each for at most ``max_epochs`` epochs (fewer on
large sets, :func:`fitters.work.epochs_for`; fewer when validation stops improving for ``patience`` epochs), then
the best one is retrained on all rows for its best epoch count. Training runs on one thread with
``torch.use_deterministic_algorithms``: two fits of the same data and seed give bitwise-identical weights, on a busy
machine too. The wall-clock budget is only a safety cap, checked between epochs (a trial still runs ``min_epochs``):
a search it cuts short says ``budget_hit`` in its record, since its result then depends on the machine's speed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from fitters import work
from fitters.model import TrainConfig

WEIGHT_DECAY = 1e-4
HUBER_DELTA = 0.1      # standardised ln units: beyond this a residual counts linearly, not squared
DEFAULT_CONFIG = work.TRAIN   # the counted work of a default fit (fitters.work)


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
    capped: bool = False   # the wall-clock cap stopped it before its counted epochs or patience


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Small networks train fastest on one thread (and leave the other cores alone); one thread also fixes the
    order of every floating-point reduction, so results do not depend on how threads split the work."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """``torch.use_deterministic_algorithms(True)`` inside the block (the caller's setting restored after): an op
    without a deterministic kernel raises instead of varying silently. Free for these CPU networks."""
    before = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before, warn_only=warn_only)


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
          seed: int, deadline: float = float("inf")) -> TrialResult:
    """Train ``module`` (called as ``module(*inputs) -> [n]``) for at most ``config.max_epochs`` epochs, stopping
    after ``config.patience`` epochs without validation improvement, and keep the best-validation weights.
    ``deadline`` (time.monotonic(), s) is a safety cap checked after ``config.min_epochs``: stopping there sets
    ``capped``."""
    generator = torch.Generator().manual_seed(seed)
    # foreach: one multi-tensor update per step instead of a loop over parameters (the same numbers; torch's default
    # takes it on GPUs only): a fifth of a small model's step on a 2-core host
    optimiser = torch.optim.Adam(module.parameters(), lr=lr, weight_decay=WEIGHT_DECAY, foreach=True)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimiser, factor=0.5, patience=max(config.patience // 3, 5))
    loss_fn = nn.HuberLoss(delta=HUBER_DELTA) if config.loss == "huber" else nn.MSELoss()
    n = fit_y.shape[0]
    best = (float("inf"), 0, {k: v.detach().clone() for k, v in module.state_dict().items()})
    start = time.monotonic()
    epoch, capped = 0, False
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
        if epoch - best[1] >= config.patience:
            break
        if epoch < config.max_epochs and epoch >= config.min_epochs and time.monotonic() > deadline:
            capped = True
            break
    return TrialResult({}, best[0], best[1], epoch, time.monotonic() - start, best[2], capped)


def search(build: Callable[[dict[str, Any]], nn.Module], points: list[dict[str, Any]],
           fit_inputs: tuple[torch.Tensor, ...], fit_y: torch.Tensor, val_inputs: tuple[torch.Tensor, ...],
           val_y: torch.Tensor, config: TrainConfig, seed: int,
           deadline: float = float("inf")) -> tuple[TrialResult, list[TrialResult], bool]:
    """Try the first ``config.trials_for(rows)`` candidates in order (candidate ``i`` seeded with ``seed + i``),
    each for at most :func:`fitters.work.epochs_for` epochs; returns (best trial, all trials, whether the
    ``deadline`` cap cut the search short)."""
    trials: list[TrialResult] = []
    capped = False
    config = dataclasses.replace(config, max_epochs=work.epochs_for(config, int(fit_y.shape[0])))
    for i, hyper in enumerate(points[:config.trials_for(int(fit_y.shape[0] + val_y.shape[0]))]):
        if trials and time.monotonic() > deadline:
            capped = True
            break
        torch.manual_seed(seed + i)
        module = build(hyper)
        result = train(module, fit_inputs, fit_y, val_inputs, val_y, hyper["lr"], config, seed + i, deadline)
        result.hyper = hyper
        trials.append(result)
        capped = capped or result.capped
    best = min(trials, key=lambda t: t.val_loss)
    return best, trials, capped


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
                 config: TrainConfig, seed: int, budget_s: float = float("inf"),
                 score: Callable[[np.ndarray, np.ndarray], float] | None = None) -> tuple[dict[str, Any],
                                                                                          dict[str, torch.Tensor],
                                                                                          dict[str, Any]]:
    """Search on (fit rows, validation rows), then retrain the best candidate on all rows for its best epoch count.
    ``budget_s`` (s) is a safety cap on the whole: once it is spent, no further candidate starts, a running one
    stops (after ``min_epochs``), the refit is skipped (the best search weights are kept) and the record says
    ``budget_hit``. ``score(predicted, measured)`` (the network's units) of the best candidate's weights on the
    validation rows, before the refit, is recorded as ``validation_gmae`` (:mod:`fitters.selection`). Returns
    (chosen hyperparameters, weights, search record)."""
    deadline = time.monotonic() + budget_s
    chosen: dict[str, float] = {}
    with torch_threads(1), deterministic():
        best, trials, capped = search(build, points, tuple(x[fit_rows] for x in inputs), y[fit_rows],
                                      tuple(x[val_rows] for x in inputs), y[val_rows], config, seed, deadline)
        if score is not None and len(val_rows):
            chosen["validation_gmae"] = round(score(_predict_with(build(best.hyper), best.state,
                                                                  tuple(x[val_rows] for x in inputs)),
                                                    y[val_rows].numpy()), 6)
        state, refit = best.state, False
        if not capped and time.monotonic() <= deadline:
            torch.manual_seed(seed)
            epochs = max(best.best_epoch, 1)
            final = train(build(best.hyper), inputs, y, tuple(x[:0] for x in inputs), y[:0], best.hyper["lr"],
                          TrainConfig(max_epochs=epochs, patience=10**9, min_epochs=1, batch_size=config.batch_size,
                                      loss=config.loss), seed, deadline)
            capped = final.capped
            if not capped:
                state, refit = final.state, True
        else:
            capped = True
    record = {"loss": config.loss, "trials": [{**t.hyper, "val_score": round(t.val_loss, 6), "best_epoch": t.best_epoch,
                                               "epochs": t.epochs, "seconds": round(t.seconds, 2)} for t in trials],
              "refit": refit, "validation_rows": int(len(val_rows)), "budget_hit": capped, **chosen,
              "work": {"max_trials": config.trials_for(int(len(fit_rows) + len(val_rows))),
                       "max_epochs": work.epochs_for(config, int(len(fit_rows))), "patience": config.patience}}
    return best.hyper, state, record


def _predict_with(module: nn.Module, state: dict[str, torch.Tensor], inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """``module`` with weights ``state`` applied to ``inputs`` (evaluation mode, no gradients)."""
    module.load_state_dict(state)
    module.eval()
    with torch.no_grad():
        return module(*inputs).detach().numpy().astype(float)
