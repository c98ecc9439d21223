"""The collectives' in-context term calibrated on whole steps: one factor per world size by which every collective's
plain curve is scaled so that the simulated steps of calibration runs match their measured (unprofiled) medians.

Why: on a host whose ranks share the cores (2 cores, two ranks, four threads), a world-size-2 step is ~35% longer
than the plain curves and the microbenchmarked compute make it, and the per-collective fit of
:mod:`fitters.collective_context` cannot see why: its rows are the 3-5 profiled iterations of each trace set, whose
collectives are bimodal (stalls of ~3-4 ms in some calls, none in others; factors of 0.16-1.15 from trace sets of one
workload). The median of a run's 20-30 unprofiled iterations is the robust quantity, and it is what predictions are
judged against; so the factor is solved for on it, on runs recorded only for this (``pmdb quickstart``'s and
``benchmarks/e2e_accuracy.sh``'s random-sharding calibration runs), never on the runs then judged.

* **Solve**: ``k`` such that the geometric mean of predicted / measured over the training trace sets is 1, every
  collective of that world size priced ``k`` x its plain champion curve (bisection on ln k; the simulated step
  rises with k). The sets are split (seeded, :func:`fitters.split.split_rows`; one workload's sets on one side,
  :func:`fitters.split.workload_groups`) when there are two or more: the held-out sets' step errors are
  the version's test scores (beside the plain curves' on the same steps).
* **Stored** as the in-context versions of :mod:`fitters.collective_context` (family ``in_context``: factor ``k``,
  no slope, no stall), one per collective the calibration traces hold, each its name's champion; a prediction of a
  training set is then in-sample (``v_prediction_errors.in_sample``). Times µs.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fitters.collective_context import FAMILY, Factor, InContextCollectiveModel, context_model_name
from fitters.split import split_rows, workload_groups
from pmdb import metrics
from pmdb.errors import PmdbError
from pmdb.store import Store
from simulator.embedding_stats import EmbeddingStats
from simulator.model_set import ModelRef
from simulator.session import PredictionSession

LN_K_RANGE = (-3.0, 4.0)   # k between 0.05 and 55: beyond, the collectives are not what is wrong
BISECTIONS = 14            # ln k to within 7 / 2**14 ~ 0.0004


@dataclass
class StepCase:
    """One calibration trace set: its graph and what its ground truth measured (µs)."""

    trace_set_id: int
    run_id: str
    workload_id: int | None
    graph: Any
    embedding: EmbeddingStats
    threads: int | None
    measured_us: float


def cases(store: Store, trace_sets: list[int], detail: bool) -> list[StepCase]:
    """The trace sets with their workload runs' measured medians (refused without one: nothing to calibrate on)."""
    from pmdb.traces.from_store import load_graphs
    from simulator.threads import run_threads

    out = []
    for ts in trace_sets:
        row = store.query("SELECT t.run_id, t.workload_id, t.world_size, w.measured_us, w.threads FROM trace_sets t "
                          "LEFT JOIN workload_runs w ON w.run_id = t.run_id WHERE t.trace_set_id = ?", [int(ts)])
        if row.empty or pd.isna(row.at[0, "measured_us"]) or int(row.at[0, "world_size"]) < 2:
            raise PmdbError(f"trace set {ts}: not a multi-rank trace set with a measured workload run (a step "
                            f"calibration needs each run's unprofiled time)")
        workload = None if pd.isna(row.at[0, "workload_id"]) else int(row.at[0, "workload_id"])
        graph = load_graphs(store, int(ts), pick="best", detail=detail)[0]
        run_id = str(row.at[0, "run_id"])
        out.append(StepCase(int(ts), run_id, workload, graph, EmbeddingStats.from_store(store, workload),
                            run_threads(store, run_id), float(row.at[0, "measured_us"])))
    return out


class _Scaled:
    """A plain collective model times k (µs)."""

    def __init__(self, base: Any, k: float):
        self.base, self.k = base, k

    def predict(self, frame: pd.DataFrame) -> np.ndarray:
        return self.k * np.asarray(self.base.predict(frame), dtype=float)


def simulate_at(session: PredictionSession, plain: dict[tuple[str, int], ModelRef], k: float,
                steps: list[StepCase]) -> np.ndarray:
    """Predicted µs of each case with every collective priced k x its plain curve."""
    for key, ref in plain.items():
        session.models.collectives[key] = ModelRef(ref.name, ref.version, _Scaled(ref.model, k), ref.family)
    return np.array([session.simulate(c.graph, c.embedding, c.threads).predicted_us for c in steps])


def solve_factor(session: PredictionSession, plain: dict[tuple[str, int], ModelRef],
                 steps: list[StepCase]) -> float:
    """k making the geomean of predicted / measured over ``steps`` 1 (clipped to :data:`LN_K_RANGE`)."""
    measured = np.array([c.measured_us for c in steps])

    def bias(ln_k: float) -> float:
        return float(np.mean(np.log(simulate_at(session, plain, math.exp(ln_k), steps) / measured)))

    lo, hi = LN_K_RANGE
    if bias(lo) >= 0:
        return math.exp(lo)
    if bias(hi) <= 0:
        return math.exp(hi)
    for _ in range(BISECTIONS):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if bias(mid) < 0 else (lo, mid)
    return math.exp(0.5 * (lo + hi))


def calibrate(store: Store, workspace: Any, platform: str, trace_sets: list[int], seed: int = 0
              ) -> tuple[pd.DataFrame, list[str]]:
    """Solve and register the step-calibrated in-context versions of every collective in the calibration traces
    (one ``fit`` run). Returns (one row per registered version, notes)."""
    from fitters.evaluate import data_hash
    from fitters.registry import Registry, VersionRecord

    if not trace_sets:
        raise PmdbError("a step calibration needs --trace-set: the runs recorded to calibrate on (never the runs "
                        "you will judge the predictions on)")
    session = PredictionSession(store, platform, models="champion+plain")
    steps = cases(store, trace_sets, session.detail)
    notes: list[str] = []
    results = []
    args = {"what": "comms-context", "target": "step", "trace_sets": sorted(trace_sets), "seed": seed}
    with store.run("fit", platform, args) as run:
        registry = Registry(workspace, store)
        for world_size in sorted({len(c.graph.ranks) for c in steps}):
            group = [c for c in steps if len(c.graph.ranks) == world_size]
            traced = sorted({op.collective for c in group for rank in c.graph.ranks for op in rank.ops
                             if op.is_collective and op.collective})
            plain = {key: ref for key, ref in session.models.collectives.items()
                     if key[1] == world_size and key[0] in traced}
            if not plain:
                notes.append(f"ws{world_size}: no plain curve of {', '.join(traced) or 'its collectives'}: "
                             f"`pmdb collect comms`, then `pmdb fit --all`")
                continue
            split = split_rows(workload_groups([c.trace_set_id for c in group], [c.workload_id for c in group]),
                               seed)
            train = [group[i] for i in split.train]
            test = [group[i] for i in split.test]
            started = time.monotonic()
            k = solve_factor(session, plain, train)
            scores: dict[str, float] = {}
            if test:
                measured = np.array([c.measured_us for c in test])
                scores = metrics.summary(simulate_at(session, plain, k, test), measured)
                scores["plain_gmae"] = metrics.gmae(simulate_at(session, plain, 1.0, test), measured)
            else:
                notes.append(f"ws{world_size}: one calibration run, nothing held out (no test error)")
            train_error = metrics.gmae(simulate_at(session, plain, k, train),
                                       np.array([c.measured_us for c in train]))   # as test_gmae
            info = {"target": "step: the geomean of predicted / measured (unprofiled median) over the training "
                              "runs is 1",
                    "train_sets": [c.trace_set_id for c in train], "test_sets": [c.trace_set_id for c in test],
                    "train_step_error": round(train_error, 4)}
            for (collective, ws), ref in sorted(plain.items()):
                model = InContextCollectiveModel(collective, ws, ref.model, f"{ref.name}:{ref.version}",
                                                 Factor(math.log(k)), info)
                record = VersionRecord(context_model_name(platform, collective, ws), platform, collective, FAMILY,
                                       world_size=ws)
                record.seed, record.n_train, record.n_test = seed, len(train), len(test)
                record.data_runs = sorted({c.run_id for c in train})
                record.data_hash = data_hash(pd.Series([c.trace_set_id for c in train]),
                                             pd.DataFrame({"k": [k] * len(train)}),
                                             np.array([c.measured_us for c in train]))
                record.metrics = {key: v for key, v in scores.items() if key != "n" or test}
                record.fit_seconds = round(time.monotonic() - started, 3)
                version = registry.log_version(store, run.run_id, record, model, [],
                                               {"id_column": "trace_set_id", "target": "step",
                                                "train_ids": info["train_sets"], "test_ids": info["test_sets"],
                                                "base": f"{ref.name}:{ref.version}"})
                registry.set_champion(store, record.name, version)
                results.append({"name": record.name, "collective": collective, "world_size": ws, "version": version,
                                "factor": k, "n_train": len(train), "n_test": len(test),
                                "test_gmae": scores.get("gmae", math.nan),
                                "plain_gmae": scores.get("plain_gmae", math.nan), "train_gmae": train_error})
        run.summary = {"versions": len(results), "notes": notes, "trace_sets": sorted(trace_sets)}
    return pd.DataFrame(results), notes
