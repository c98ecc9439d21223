"""Reuse factors on hand-made index streams whose answer is known."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.embedding.reuse import NUM_BINS, count_bins, reuse_factors


def test_empty_gives_zeros():
    rf = reuse_factors(np.array([], dtype=np.int64))
    assert rf.shape == (NUM_BINS,) and not rf.any()


def test_counts_land_in_their_bins():
    # index 5 three times -> (2,4]; 7 once -> (0,1]; 9 twice -> (1,2]; 11 five times -> (4,8]
    stream = np.array([5, 7, 5, 9, 11, 11, 5, 9, 11, 11, 11])
    rf = reuse_factors(stream)
    expected = np.zeros(NUM_BINS)
    expected[[0, 1, 2, 3]] = 0.25
    np.testing.assert_allclose(rf, expected)


@pytest.mark.parametrize("count, bin_index", [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (8, 3), (9, 4),
                                              (2 ** 14, 14), (2 ** 14 + 1, 15), (2 ** 15, 15), (2 ** 15 + 1, 16),
                                              (10 ** 7, 16)])
def test_bin_edges_are_right_closed(count, bin_index):
    assert int(count_bins(np.array([count]))[0]) == bin_index


def test_edge_counts_in_a_stream():
    # one index looked up 2^15 times (bin 15), one 2^15 + 1 times (bin 16), two once (bin 0)
    stream = np.concatenate([np.full(2 ** 15, 1), np.full(2 ** 15 + 1, 2), [3, 4]])
    rf = reuse_factors(np.random.default_rng(0).permutation(stream))
    assert rf[15] == pytest.approx(0.25) and rf[16] == pytest.approx(0.25) and rf[0] == pytest.approx(0.5)
    assert rf.sum() == pytest.approx(1.0)


def test_all_distinct_is_all_in_first_bin():
    rf = reuse_factors(np.arange(1000))
    assert rf[0] == 1.0 and rf[1:].sum() == 0.0
