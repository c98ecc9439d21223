"""Stored predictions: the row written per prediction (with the exact model and overhead versions used) and the
ground truth it is judged against. Times are µs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.set_rows import trace_set_info
from simulator.cross_gpu_range import SpecRange
from simulator.llc_found import LlcFound
from simulator.compute_phase import ComputePace
from simulator.memory_phase import MemoryPace
from simulator.engine import SimResult
from simulator.model_set import ModelSelection
from simulator.semantics import RULES_VERSION

SELF_PRICED_FALLBACKS = ("trace", "mined-self")  # fallbacks that price an op by the predicted trace's own times
SELF_PRICED_LIMIT = 0.5  # a model-mode prediction with more of its work priced by its own trace is not a model result


@dataclass
class ModelUse:
    """One registered model version used by a prediction and how many kernels it predicted."""

    name: str
    version: int
    ops_predicted: int


@dataclass
class Prediction:
    """A prediction of one trace set's per-iteration time, ready to store."""

    trace_set_id: int
    mode: str                               # 'model' or 'replay'
    source_platform: str
    target_platform: str
    result: SimResult                       # the representative (median) iteration, from an idle machine
    predicted_us: float                     # steady-state iteration time, median over the simulated iterations
    iterations: int = 1
    measured_us: float | None = None
    workload_run_id: str | None = None
    models: list[ModelUse] = field(default_factory=list)
    overhead_version: int | None = None
    model_selection: ModelSelection | None = None  # what model mode was asked for and selected (None in replay)
    unmodelled: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)  # e.g. kernel models fitted at another thread count
    defaults: list[str] = field(default_factory=list)  # documented defaults it priced with (no overhead table, ...)
    phases_us: dict[str, float] = field(default_factory=dict)  # model mode: fw / bw / optimizer ops alone (µs)
    iteration: Any = None  # the simulated iteration op by op, when recorded (simulator.chrome_trace; not stored)
    measured_ops: int = 0  # model mode: ops priced by the measured median of their exact shape (--kernels measured)
    spec_range: SpecRange | None = None  # spec-only GPU: the step as far off as on each held-out source GPU
    memory_pace: MemoryPace | None = None  # CPU truth measured here: the host's memory phase at it against its prices'
    compute_pace: ComputePace | None = None  # the same for its compute phase (simulator.compute_phase)
    llc_found: LlcFound | None = None      # the LLC the run found, where reuse pricing used it (simulator.llc_found)

    @property
    def range_ms(self) -> str | None:
        """The spec-only range as 'low-high' ms for tables, None without one."""
        return None if self.spec_range is None else self.spec_range.label_ms(self.predicted_us)

    @property
    def model_set(self) -> str | None:
        """Canonical text of the versions used, ``name:version`` sorted and comma-separated (None in replay)."""
        if self.mode == "replay":
            return None
        return ",".join(f"{m.name}:{m.version}" for m in sorted(self.models, key=lambda m: m.name)) or "(none)"

    @property
    def self_priced_share(self) -> float | None:
        """Model mode: share of the predicted work (µs over ranks and streams) priced by the predicted trace's own
        durations (ops that kept their traced time, or priced by rows mined from this very trace set:
        'mined-self'): replay, not a model. None in replay mode."""
        if self.mode != "model":
            return None
        return float(sum(r.get("predicted_share") or 0.0 for r in self.unmodelled
                         if r.get("fallback") in SELF_PRICED_FALLBACKS))

    @property
    def self_priced(self) -> bool:
        """Mostly self-priced (more than SELF_PRICED_LIMIT of the work): left out of model error statistics."""
        share = self.self_priced_share
        return share is not None and share > SELF_PRICED_LIMIT

    @property
    def rel_error(self) -> float | None:
        if not self.measured_us:
            return None
        return (self.predicted_us - self.measured_us) / self.measured_us

    def per_rank(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.result.ranks]


def _selection_columns(selection: ModelSelection | None) -> dict[str, Any]:
    """The ``selection_*`` columns of a prediction row (migration 0002)."""
    if selection is None:
        return {}
    return {"selection_spec": selection.spec, "selection_cache_state": selection.cache_state,
            "selection_digest": selection.digest, "comm_shares_core": selection.comm_shares_core,
            "selection_kernels": selection.kernels, "measurements_upto": selection.measurements_upto}


def _range_columns(pred: Prediction) -> dict[str, Any]:
    """The ``range_*`` columns of a prediction row (migration 0019); none without a spec-only range."""
    if pred.spec_range is None:
        return {}
    low, high = pred.spec_range.bounds(pred.predicted_us)
    return {"range_low_us": low, "range_high_us": high, "range_detail": pred.spec_range.to_json()}


def store_prediction(store: Store, run_id: str, pred: Prediction) -> int:
    """Insert the prediction and its model versions; returns the prediction id."""
    res = pred.result
    with store.transaction():
        prediction_id = store.insert_one("predictions", {
            "run_id": run_id, "trace_set_id": int(pred.trace_set_id), "workload_run_id": pred.workload_run_id,
            "source_platform": pred.source_platform, "target_platform": pred.target_platform, "mode": pred.mode,
            "model_set": pred.model_set, **_selection_columns(pred.model_selection),
            "overhead_version": pred.overhead_version,
            "predicted_us": float(pred.predicted_us), "isolated_us": res.predicted_us,
            "device_active_us": res.device_active_us,
            "baseline_us": res.baseline_us, "comm_unoverlapped_frac": res.comm_unoverlapped_frac,
            "measured_us": pred.measured_us, "per_rank": pred.per_rank(), "unmodelled": pred.unmodelled,
            "iterations": pred.iterations, "elapsed_s": pred.elapsed_s, "rules_version": RULES_VERSION,
            "measured_ops": pred.measured_ops if pred.mode == "model" else None,
            "self_priced_share": pred.self_priced_share,
            **_range_columns(pred),
            **{f"predicted_{phase}_us": us for phase, us in pred.phases_us.items()}}, returning="prediction_id")
        for use in pred.models:
            store.insert_one("prediction_models", {"prediction_id": prediction_id, "name": use.name,
                                                   "version": int(use.version), "ops_predicted": use.ops_predicted})
    return int(prediction_id)


def store_derived_trace_set(store: Store, run_id: str, *, parent: int, platform: str, world_size: int,
                            label: str, workload_id: int | None, derivation: dict[str, Any]) -> int:
    """A trace set derived from trace set ``parent`` without running it (source 'derived', no trace files): the
    transformation in ``derivation`` (JSON), the workload it describes or its parent's; returns its id."""
    return int(store.insert_one("trace_sets", {
        "run_id": run_id, "platform": platform, "workload_id": workload_id, "label": label,
        "world_size": int(world_size), "source": "derived", "parent_trace_set_id": int(parent),
        "derivation": derivation}, returning="trace_set_id"))


def trace_set_for_run(store: Store, workload_run_id: str) -> int:
    """The trace set a workload run recorded itself (same run id), else the latest completed trace set recorded for
    its workload (same workload id). Runs of one workload id are one shape and plan measured again (two seeds of
    the random sharder may draw one plan), each with its own traces and truth, so a run's own traces come first.
    Derived trace sets (made by the sharding study from a recorded one) have no workload run of their own and are
    never picked."""
    run = store.query("SELECT workload_id, platform FROM v_workload_runs WHERE run_id = ?", [workload_run_id])
    if run.empty:
        raise PmdbError(f"no completed workload run {workload_run_id!r} (`pmdb runs --kind workload` lists them)")
    found = store.scalar("SELECT trace_set_id FROM v_trace_sets WHERE workload_id = ? AND source <> 'derived' "
                         "ORDER BY (run_id = ?) DESC, (platform = ?) DESC, created_at DESC, trace_set_id DESC "
                         "LIMIT 1", [int(run.iloc[0]["workload_id"]), workload_run_id, run.iloc[0]["platform"]])
    if found is None:
        raise PmdbError(f"workload run {workload_run_id} has no captured trace set to predict from "
                        f"(workload {int(run.iloc[0]['workload_id'])})")
    return int(found)


def ground_truth(store: Store, trace_set_id: int, target_platform: str, mode: str,
                 workload_run_id: str | None = None, *, info: dict[str, Any] | None = None
                 ) -> tuple[str | None, float | None]:
    """(workload run id, measured µs) a prediction is judged against.

    Replay reproduces the traced execution, so it is judged against the trace's own median iteration time.
    Model mode is judged against a measured workload run (the given one, else the run that recorded the trace set
    when it was measured on the target platform, else the latest run of the trace set's workload there), falling
    back to the trace's own time when there is none. ``info``: the trace set's row, when already read
    (:func:`pmdb.traces.set_rows.trace_set_info`).
    """
    info = trace_set_info(store, trace_set_id) if info is None else info
    own = None if pd.isna(info.get("measured_us")) else float(info["measured_us"])
    if mode == "replay":
        return None, own
    if workload_run_id is not None:
        value = store.scalar("SELECT measured_us FROM v_workload_runs WHERE run_id = ?", [workload_run_id])
        return workload_run_id, None if value is None else float(value)
    if info.get("workload_id") is not None and not pd.isna(info.get("workload_id")):
        row = store.conn.execute(
            "SELECT run_id, measured_us FROM v_workload_runs WHERE workload_id = ? AND platform = ? "
            "AND measured_us IS NOT NULL ORDER BY (run_id = ?) DESC, finished_at DESC LIMIT 1",
            [int(info["workload_id"]), target_platform, str(info.get("run_id"))]).fetchone()
        if row is not None:
            return row[0], float(row[1])
    return None, own if info["platform"] == target_platform else None
