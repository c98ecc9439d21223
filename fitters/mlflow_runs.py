"""MLflow runs of what the store holds besides model versions: overhead versions (experiment ``pmdb-overheads``) and
predictions (``pmdb-predictions``). Each run carries the store's ids as tags (``pmdb.run``, ``overhead_version``,
``prediction_id``, ...), so the UI and the store point at each other; the store stays the record, MLflow the view.
Logged through the workspace's registry (:class:`fitters.registry.Registry`: its mlflow.db with artifacts inside the
workspace, or ``--tracking-uri``), after the store's run completed: a failure to log loses nothing stored."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fitters.registry import Registry, without_empty
from pmdb.errors import PmdbError
from pmdb.store import Store

OVERHEADS_EXPERIMENT = "pmdb-overheads"
PREDICTIONS_EXPERIMENT = "pmdb-predictions"
PARAM_CHARS = 6000  # MLflow's limit on a param value


@dataclass
class RunRecord:
    """One MLflow run to log: its name, tags (store ids), params and metrics (units in the key: _ms, _us, _pct)."""

    name: str
    tags: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)


def log_runs(store: Store, experiment: str, records: list[RunRecord]) -> list[str]:
    """Log one finished MLflow run per record in ``experiment`` (created on first use, its artifacts in
    artifacts/mlflow/<experiment>); the run ids. Refuses (one line) when the registry lost the versions the store
    mirrors, as fit and predict do."""
    from mlflow.entities import Metric, Param
    from mlflow.exceptions import MlflowException

    registry = Registry(store.workspace, store)
    out = []
    try:
        experiment_id = registry.experiment(experiment, experiment, {"pmdb.kind": experiment})
        for record in records:
            run = registry.client.create_run(experiment_id, run_name=record.name,
                                             tags=without_empty(record.tags))
            stamp = run.info.start_time
            metrics = [Metric(k, float(v), stamp, 0) for k, v in record.metrics.items()
                       if v is not None and math.isfinite(float(v))]
            params = [Param(k, str(v)[:PARAM_CHARS]) for k, v in without_empty(record.params).items()]
            registry.client.log_batch(run.info.run_id, metrics=metrics, params=params)
            registry.client.set_terminated(run.info.run_id)
            out.append(run.info.run_id)
    except MlflowException as exc:
        raise PmdbError(f"logging to MLflow ({registry.uri}) failed after {len(out)} of {len(records)} runs "
                        f"(the store keeps everything): {str(exc).splitlines()[0][:200]}") from None
    return out
