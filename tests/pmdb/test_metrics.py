import math

import numpy as np
import pytest

from pmdb import metrics


def test_metrics_on_known_numbers():
    predicted, actual = [110.0, 90.0, 100.0], [100.0, 100.0, 100.0]
    assert metrics.relative_errors(predicted, actual).tolist() == pytest.approx([0.1, -0.1, 0.0])
    assert metrics.mape(predicted, actual) == pytest.approx(0.2 / 3)
    expected_gmae = math.exp((2 * math.log(0.1004) + math.log(0.0004)) / 3)
    assert metrics.gmae(predicted, actual) == pytest.approx(expected_gmae)
    assert metrics.abs_error_std(predicted, actual) == pytest.approx(np.std([0.1, 0.1, 0.0], ddof=1))
    s = metrics.summary(predicted, actual)
    assert s["n"] == 3 and s["max"] == pytest.approx(0.1) and s["min"] == 0.0
