"""The counted work of the learned families' searches by default (no torch or scikit-learn import).

A fit's search is bounded by these counts, not by the clock, so its result is a function of its data and seed:
``TRAIN`` for the torch families (mlp, DeepSets: ``max_trials`` candidates per search, fewer on small sets, see
``TrainConfig.trials_for``; each for at most ``max_epochs`` epochs and at most ``ROW_PASSES`` rows trained on, i.e.
fewer epochs on large sets, never under ``min_epochs``; early stop after ``patience`` epochs without improvement)
and ``GBDT_TRIALS`` candidates per gbdt search. `pmdb fit --trials/--max-epochs` change them; ``--budget-minutes``
is only a safety cap. The values match the work the time-budgeted searches did before on this project's reference
fits (README "Fitting": 2 candidates, a few hundred epochs each, measured 2026-11-28).
"""
from __future__ import annotations

import math

from fitters.model import TrainConfig

TRAIN = TrainConfig(max_trials=2, max_epochs=400)
GBDT_TRIALS = 2
ROW_PASSES = 600_000   # rows × epochs per candidate at most: 1400 rows -> 400 epochs, 14 000 rows -> 43


def epochs_for(config: TrainConfig, rows: int) -> int:
    """Epochs one candidate trains at most on ``rows`` rows: ``config.max_epochs``, fewer on large sets."""
    return min(config.max_epochs, max(config.min_epochs, math.ceil(ROW_PASSES / max(rows, 1))))
