"""Seeded train/test splits. Metrics are reported on the test side only.

Kernel ops: 80/20 over configurations (rows with the same ``config_key`` — the same op, pass and parameters measured
by several runs — always land on the same side, so a configuration seen in training is never scored as unseen).
Collectives: every fifth equal-split message size (sorted, counting from the fifth) and every random-split point are
held out; the model trains on the remaining equal-split sizes. Fits on workload traces (the collectives' in-context
term) split by :func:`workload_groups`: a workload's trace sets on one side.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

TEST_FRACTION = 0.2
HOLDOUT_EVERY = 5


@dataclass(frozen=True)
class Split:
    """Positional row indices of the training and test sides."""

    train: np.ndarray
    test: np.ndarray

    def __post_init__(self) -> None:
        if np.intersect1d(self.train, self.test).size:
            raise ValueError("train and test share rows")


def split_rows(groups: pd.Series | np.ndarray, seed: int, test_fraction: float = TEST_FRACTION) -> Split:
    """80/20 split of rows by group (e.g. config_key): a seeded permutation of the distinct groups.

    At least one group goes to each side when there are two or more groups.
    """
    keys = pd.Series(np.asarray(groups)).astype(str)
    distinct = np.array(sorted(keys.unique()))
    rng = np.random.default_rng(seed)
    order = rng.permutation(distinct.size)
    n_test = int(round(distinct.size * test_fraction))
    if distinct.size >= 2:
        n_test = min(max(n_test, 1), distinct.size - 1)
    test_keys = set(distinct[order[:n_test]])
    is_test = keys.isin(test_keys).to_numpy()
    return Split(np.flatnonzero(~is_test), np.flatnonzero(is_test))


def workload_groups(trace_sets: Sequence[int], workloads: Sequence[int | None]) -> np.ndarray:
    """:func:`split_rows` groups that hold a workload's trace sets out together (one shape and plan recorded several
    times is one case, never on both sides): 'w<workload id>', or 't<trace set id>' for a set without a workload
    (an imported one)."""
    return np.array([f"t{int(t)}" if w is None or pd.isna(w) else f"w{int(w)}"
                     for t, w in zip(trace_sets, workloads)],
                    dtype=object)


def split_collective(sizes: pd.Series | np.ndarray, split_kind: pd.Series | np.ndarray) -> Split:
    """Hold out every fifth distinct equal-split size and all random-split points."""
    sizes = np.asarray(sizes)
    random_split = np.asarray(split_kind) == "random"
    distinct = np.unique(sizes[~random_split])
    held_sizes = distinct[HOLDOUT_EVERY - 1::HOLDOUT_EVERY]
    is_test = random_split | np.isin(sizes, held_sizes)
    return Split(np.flatnonzero(~is_test), np.flatnonzero(is_test))
