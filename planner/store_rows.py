"""Planner results as store rows: plan_studies + plan_configs (one study per search) and plan_validations."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from pmdb.store import Store
from planner.candidates import Framework
from planner.evaluate import BREAKDOWN_KEYS
from planner.model import Transformer
from planner.search import SearchResult
from planner.system import System

_NOT_CONFIG = {"rank", "strategy", "time_s", "samples_per_s", "tokens_per_s", "memory_gb", *BREAKDOWN_KEYS}
_MEMORY = ("weights", "gradients", "optimizer", "activations")


def _plain(value: Any) -> Any:
    """Python scalars for JSON; whole floats (int columns another strategy left empty) back to int."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def save_study(store: Store, run_id: str, *, model: Transformer, system: System, gpus: int, global_batch: int,
               strategy: str, fw: Framework, result: SearchResult, domain: int, platform: str | None = None,
               calibrated: bool = False) -> int:
    """Insert one study and its ranked configurations; returns the study id."""
    study_id = store.insert_one("plan_studies", {
        "run_id": run_id, "model_name": model.name, "model": model.as_dict(), "system": system.as_dict(),
        "system_name": system.name, "platform": platform, "nvlink_domain": domain, "gpus": gpus,
        "global_batch": global_batch, "strategy": strategy, "framework": fw.as_dict(), "calibrated": calibrated,
        "model_usage": result.usage, "evaluated": result.evaluated, "feasible": result.feasible,
        "min_memory_bytes": None if not np.isfinite(result.min_memory_bytes) else result.min_memory_bytes,
        "elapsed_s": result.elapsed_s}, returning="study_id")
    if not result.top.empty:
        store.insert("plan_configs", config_rows(study_id, result.top))
    return int(study_id)


def config_rows(study_id: int, top: pd.DataFrame) -> list[dict[str, Any]]:
    rows = []
    for _, r in top.iterrows():
        config = {k: _plain(v) for k, v in r.items() if k not in _NOT_CONFIG and not k.startswith("mem_")
                  and not (isinstance(v, float) and np.isnan(v))}
        rows.append({"study_id": study_id, "position": int(r["rank"]), "strategy": r["strategy"], "config": config,
                     "time_s": float(r["time_s"]), "throughput": float(r["samples_per_s"]),
                     "memory_bytes": float(r["memory_gb"]) * 1e9,
                     "memory": {k: float(r[f"mem_{k}_gb"]) * 1e9 for k in _MEMORY},
                     "breakdown": {k: float(r[k]) for k in BREAKDOWN_KEYS}})
    return rows


def save_validation(store: Store, run_id: str, rows: pd.DataFrame, *, source_file: str, system: System,
                    fw: Framework) -> int:
    """Insert the per-row predictions of a validation; returns how many."""
    config_cols = [c for c in rows.columns if c not in ("measured_s", "predicted_s", "rel_error", "breakdown",
                                                        "memory_gb")]
    out = [{"run_id": run_id, "row_index": int(i), "source_file": source_file, "system_name": system.name,
            "framework": fw.name, "config": {c: _plain(r[c]) for c in config_cols},
            "measured_s": float(r["measured_s"]), "predicted_s": float(r["predicted_s"]),
            "rel_error": float(r["rel_error"]), "breakdown": r["breakdown"]} for i, r in rows.iterrows()]
    store.insert("plan_validations", out)
    return len(out)
