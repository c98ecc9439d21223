"""Stored predictions as MLflow runs (``pmdb predict --log-mlflow``), one per prediction in the experiment
``pmdb-predictions``: tags prediction_id, trace_set_id, the store's run, mode, platforms, the model selection and
overhead version; metrics predicted_ms, measured_ms, error_pct (signed, of measured), abs_error_pct, baseline_ms,
isolated_ms, elapsed_s, and for a GPU known by its spec sheet only range_low_ms / range_high_ms (its spec-only range,
:mod:`simulator.cross_gpu_range`). Read back from the store, so what MLflow shows is what was stored.

Opt-in: logging adds about 1.7 s (loading MLflow and its store; measured 2.6 s against 0.9 s for a replay prediction
of an imported trace), so predict imports no MLflow unless asked."""
from __future__ import annotations

from typing import Any

import pandas as pd

from pmdb.store import Store

_COLUMNS = ("prediction_id, run_id, trace_set_id, workload_run_id, source_platform, target_platform, mode, model_set, "
            "selection_spec, selection_cache_state, selection_digest, overhead_version, predicted_us, isolated_us, "
            "baseline_us, measured_us, elapsed_s, iterations, selection_kernels, measurements_upto, measured_ops, "
            "range_low_us, range_high_us")


def _ms(us: Any) -> float | None:
    return None if us is None or pd.isna(us) else float(us) / 1000.0


def prediction_records(store: Store, prediction_ids: list[int]) -> list[Any]:
    """One :class:`fitters.mlflow_runs.RunRecord` per stored prediction, in the order given."""
    from fitters.mlflow_runs import RunRecord

    frame = store.query(f"SELECT {_COLUMNS} FROM predictions WHERE list_contains(?::BIGINT[], prediction_id) "
                        "ORDER BY prediction_id", [[int(p) for p in prediction_ids]])
    out = []
    for row in frame.itertuples(index=False):
        measured = row.measured_us if row.measured_us is not None and not pd.isna(row.measured_us) else None
        error = None if not measured else (row.predicted_us - measured) / measured
        selection = "" if row.mode == "replay" else f" {row.selection_spec}/{row.selection_cache_state}"
        out.append(RunRecord(
            f"prediction {row.prediction_id}: trace set {row.trace_set_id} {row.mode}{selection} on "
            f"{row.target_platform}",
            tags={"prediction_id": int(row.prediction_id), "trace_set_id": int(row.trace_set_id),
                  "pmdb.run": row.run_id, "workload_run_id": row.workload_run_id, "mode": row.mode,
                  "source_platform": row.source_platform, "platform": row.target_platform,
                  "overhead_version": None if pd.isna(row.overhead_version) else int(row.overhead_version),
                  "model_selection": None if row.mode == "replay" else
                  f"{row.selection_spec}/{row.selection_cache_state}/{row.selection_digest}",
                  "kernels": None if pd.isna(row.selection_kernels) else row.selection_kernels,
                  "measurements_upto": None if pd.isna(row.measurements_upto) else int(row.measurements_upto)},
            params={"model_set": row.model_set, "iterations": row.iterations,
                    "measured_ops": None if pd.isna(row.measured_ops) else int(row.measured_ops)},
            metrics={"predicted_ms": _ms(row.predicted_us), "measured_ms": _ms(measured),
                     "error_pct": None if error is None else 100.0 * error,
                     "abs_error_pct": None if error is None else 100.0 * abs(error),
                     "baseline_ms": _ms(row.baseline_us), "isolated_ms": _ms(row.isolated_us),
                     "elapsed_s": row.elapsed_s, "range_low_ms": _ms(row.range_low_us),
                     "range_high_ms": _ms(row.range_high_us)}))
    return out


def log_predictions(store: Store, prediction_ids: list[int]) -> list[str]:
    """Log stored predictions as finished MLflow runs in ``pmdb-predictions``; their MLflow run ids."""
    from fitters.mlflow_runs import PREDICTIONS_EXPERIMENT, log_runs

    return log_runs(store, PREDICTIONS_EXPERIMENT, prediction_records(store, prediction_ids))
