"""Where a registered model version can be looked at: its fit's scatter plot among the workspace's MLflow artifacts
(a relative link from the report folder) and its run page in the MLflow UI that `pmdb ui` serves."""
from __future__ import annotations

import html
import os
import sqlite3
from pathlib import Path

from pmdb.config import Workspace

UI = "http://127.0.0.1:5000"


def experiments(workspace: Workspace) -> dict[str, str]:
    """MLflow run id -> experiment id, read from the workspace's MLflow sqlite store (empty when unreadable)."""
    db = workspace.mlflow_db
    if not db.is_file():
        return {}
    try:
        with sqlite3.connect(f"file:{db.resolve()}?mode=ro", uri=True) as con:
            return {str(r): str(e) for r, e in con.execute("SELECT run_uuid, experiment_id FROM runs")}
    except sqlite3.Error:
        return {}


def scatter(workspace: Workspace, mlflow_run_id: str) -> Path | None:
    """The held-out scatter plot logged with the run (``artifacts/mlflow/<platform>/<run>/artifacts/plots``)."""
    found = sorted(workspace.mlflow_artifacts.glob(f"*/{mlflow_run_id}/artifacts/plots/*.scatter.png"))
    return found[0] if found else None


def cell(workspace: Workspace, mlflow_run_id: str, out_dir: Path, runs: dict[str, str]) -> str:
    """HTML of the links cell: the scatter plot (relative to ``out_dir``) and the MLflow run page, or the run id."""
    parts = []
    plot = scatter(workspace, mlflow_run_id)
    if plot is not None:
        try:
            href = os.path.relpath(plot.resolve(), Path(out_dir).resolve())
        except ValueError:
            href = plot.resolve().as_uri()
        parts.append(f"<a href='{html.escape(href)}'>scatter</a>")
    experiment = runs.get(mlflow_run_id)
    if experiment is not None:
        url = f"{UI}/#/experiments/{experiment}/runs/{mlflow_run_id}"
        parts.append(f"<a href='{html.escape(url)}' title='needs `pmdb ui` running'>MLflow</a>")
    else:
        parts.append(f"<span title='MLflow run id'>{html.escape(mlflow_run_id[:8])}</span>")
    return " ".join(parts)
