"""Error metrics used everywhere (method.md section 2): one implementation."""
from __future__ import annotations

import numpy as np

GMAE_EPSILON = 4e-4


def relative_errors(predicted, actual) -> np.ndarray:
    """e = (predicted - actual) / actual, element-wise."""
    predicted = np.asarray(predicted, dtype=float)
    actual = np.asarray(actual, dtype=float)
    return (predicted - actual) / actual


def gmae(predicted, actual) -> float:
    """Geometric mean of |e|: exp(mean(ln(|e| + 4e-4)))."""
    abs_e = np.abs(relative_errors(predicted, actual))
    return float(np.exp(np.mean(np.log(abs_e + GMAE_EPSILON)))) if abs_e.size else float("nan")


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
