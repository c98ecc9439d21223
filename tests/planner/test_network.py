"""Two-tier ring collectives."""
import numpy as np
import pytest

from planner.network import ring_time


def test_all_reduce_inside_one_domain(a100):
    V = 256e6
    t = ring_time("all_reduce", np.array([V]), np.array([8]), np.array([8]), a100)[0]
    expected = 2 * 7 / 8 * V / (300e9 * 0.7) + 2 * 7 * 2.5e-6
    assert t == pytest.approx(expected)


def test_groups_across_domains_use_the_nics_of_their_members(a100):
    V = 256e6
    # 16 GPUs, 4 per domain: 4 rings in parallel over 4 × 25 GB/s NICs
    t = ring_time("all_gather", np.array([V]), np.array([16]), np.array([4]), a100)[0]
    assert t == pytest.approx(15 / 16 * V / (4 * 25e9 * 0.7) + 15 * 5e-6)
    one_per_domain = ring_time("all_gather", np.array([V]), np.array([16]), np.array([1]), a100)[0]
    assert one_per_domain > 3.9 * (t - 15 * 5e-6)


def test_point_to_point_and_trivial_groups(a100):
    V = 64e6
    inside, across = ring_time("p2p", np.array([V, V]), np.array([4, 4]), np.array([4, 2]), a100)
    assert inside == pytest.approx(V / (300e9 * 0.7) + 2.5e-6)
    assert across == pytest.approx(V / (25e9 * 0.7) + 5e-6)   # the seed charged 0 here
    assert ring_time("all_reduce", np.array([V]), np.array([1]), np.array([1]), a100)[0] == 0.0
    bcast = ring_time("broadcast", np.array([V]), np.array([8]), np.array([8]), a100)[0]
    assert bcast == pytest.approx(V / (300e9 * 0.7) + 7 * 2.5e-6)
