import math

import numpy as np
import pytest

from pmdb import metrics


def test_metrics_on_known_numbers():
    predicted, actual = [110.0, 90.0, 100.0], [100.0, 100.0, 100.0]
    assert metrics.relative_errors(predicted, actual).tolist() == pytest.approx([0.1, -0.1, 0.0])
    assert metrics.mape(predicted, actual) == pytest.approx(0.2 / 3)
    expected_gmae = math.exp((2 * math.log(0.1004) + math.log(0.0004)) / 3) - 0.0004
    assert metrics.gmae(predicted, actual) == pytest.approx(expected_gmae)
    assert metrics.abs_error_std(predicted, actual) == pytest.approx(np.std([0.1, 0.1, 0.0], ddof=1))
    s = metrics.summary(predicted, actual)
    assert s["n"] == 3 and s["max"] == pytest.approx(0.1) and s["min"] == 0.0


def test_gmae_of_one_error_is_that_error_and_of_zero_errors_zero():
    assert metrics.gmae([116.81], [100.0]) == pytest.approx(0.1681, abs=1e-12)   # not 16.85%: epsilon removed
    assert metrics.gmae([100.0, 50.0], [100.0, 50.0]) == pytest.approx(0.0, abs=1e-15)
    assert math.isnan(metrics.gmae([], []))


def test_sql_gmae_is_the_python_one():
    import duckdb

    errors = [0.1681, 0.02, 0.0, 0.5]
    conn = duckdb.connect()
    for n in (1, 2, 4):
        got = conn.execute(f"SELECT {metrics.gmae_sql('e')} FROM unnest(?::DOUBLE[]) AS t(e)",
                           [errors[:n]]).fetchone()[0]
        assert got == pytest.approx(metrics.gmae_of_abs(errors[:n]), rel=1e-12)
