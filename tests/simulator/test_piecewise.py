"""simulator.piecewise.linear: the curve lookup cache_decay, code_away and llc_found share."""
import pytest

from simulator.piecewise import linear


def test_linear_between_points_and_held_at_both_ends():
    xs, ys = (0.0, 1000.0, 4000.0), (1.0, 0.5, 0.2)
    assert linear(-5.0, xs, ys) == 1.0 and linear(0.0, xs, ys) == 1.0
    assert linear(500.0, xs, ys) == pytest.approx(0.75)
    assert linear(1000.0, xs, ys) == pytest.approx(0.5)
    assert linear(2500.0, xs, ys) == pytest.approx(0.35)
    assert linear(4000.0, xs, ys) == pytest.approx(0.2) and linear(1e9, xs, ys) == 0.2
