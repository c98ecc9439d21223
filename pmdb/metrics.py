"""Error metrics used everywhere (method.md section 2): one implementation.

GMAE is the geometric mean of |e| shifted by a small epsilon so that a zero error does not make it zero:
exp(mean(ln(|e| + eps))) - eps. The epsilon is removed again, so one error of 16.81% has a GMAE of 16.81% (not
16.85%) and all-zero errors have a GMAE of 0. SQL views spell the same formula (:func:`gmae_sql`).
"""
from __future__ import annotations

import numpy as np

GMAE_EPSILON = 4e-4


def relative_errors(predicted, actual) -> np.ndarray:
    """e = (predicted - actual) / actual, element-wise."""
    predicted = np.asarray(predicted, dtype=float)
    actual = np.asarray(actual, dtype=float)
    return (predicted - actual) / actual


def gmae_of_abs(abs_errors) -> float:
    """GMAE of absolute relative errors (fractions): exp(mean(ln(|e| + 4e-4))) - 4e-4; NaN without errors."""
    abs_e = np.abs(np.asarray(abs_errors, dtype=float))
    if not abs_e.size:
        return float("nan")
    return float(np.exp(np.mean(np.log(abs_e + GMAE_EPSILON))) - GMAE_EPSILON)


def gmae(predicted, actual) -> float:
    """Geometric mean of |e|: exp(mean(ln(|e| + 4e-4))) - 4e-4 (exactly |e| for one error)."""
    return gmae_of_abs(relative_errors(predicted, actual))


def gmae_sql(column: str) -> str:
    """The same GMAE as a SQL aggregate expression over a column of |e| (fractions)."""
    return f"(exp(avg(ln({column} + {GMAE_EPSILON}))) - {GMAE_EPSILON})"


def mape(predicted, actual) -> float:
    """Mean of |e|."""
    abs_e = np.abs(relative_errors(predicted, actual))
    return float(abs_e.mean()) if abs_e.size else float("nan")


def abs_error_std(predicted, actual) -> float:
    """Sample standard deviation of |e|."""
    abs_e = np.abs(relative_errors(predicted, actual))
    return float(abs_e.std(ddof=1)) if abs_e.size > 1 else float("nan")


def summary(predicted, actual) -> dict[str, float]:
    """GMAE, MAPE, std of |e|, min/max |e| and n."""
    abs_e = np.abs(relative_errors(predicted, actual))
    return {"gmae": gmae(predicted, actual), "mape": mape(predicted, actual), "std": abs_error_std(predicted, actual),
            "min": float(abs_e.min()) if abs_e.size else float("nan"),
            "max": float(abs_e.max()) if abs_e.size else float("nan"), "n": int(abs_e.size)}
