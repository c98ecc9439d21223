"""Reuse factors of one table in one batch (method.md section 5).

Each unique index is looked up some number of times c >= 1. The 17 bins are (0,1], (1,2], (2,4], ...,
(2^14, 2^15] and > 2^15; a bin's reuse factor is the share of unique indices whose count falls in it.
"""
from __future__ import annotations

import numpy as np

NUM_BINS = 17
# Upper edges of the first 16 bins: 1, 2, 4, ..., 2^15; the last bin is everything above 2^15.
BIN_UPPER = np.array([2 ** k for k in range(NUM_BINS - 1)], dtype=np.int64)


def count_bins(counts: np.ndarray) -> np.ndarray:
    """Bin index (0..16) of each lookup count c >= 1: the first bin whose upper edge is >= c."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.searchsorted(BIN_UPPER, counts, side="left")


def reuse_histogram(counts: np.ndarray) -> np.ndarray:
    """Share of the given per-unique-index counts in each of the 17 bins (17 zeros when empty)."""
    counts = np.asarray(counts, dtype=np.int64)
    if counts.size == 0:
        return np.zeros(NUM_BINS)
    hist = np.bincount(count_bins(counts), minlength=NUM_BINS).astype(float)
    return hist / counts.size


def reuse_factors(indices: np.ndarray) -> np.ndarray:
    """The 17 reuse factors of one table's indices in one batch (any integer array; empty -> 17 zeros)."""
    flat = np.asarray(indices).reshape(-1)
    if flat.size == 0:
        return np.zeros(NUM_BINS)
    _, counts = np.unique(flat, return_counts=True)
    return reuse_histogram(counts)
