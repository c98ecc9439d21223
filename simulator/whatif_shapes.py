"""``pmdb predict --what-if --measure-shapes``: before a derived configuration is predicted on this machine, measure
the op shapes it holds that the store does not (the kernel microbenchmarks of ``collect ops --from-traces``, on the
derived graphs instead of recorded ones), then refit the ops that got new rows, so that no op of the prediction is
priced by a model far from its measurements. Only kernels are run, never the configuration itself.

A batch-scaled graph's GEMMs and element-wise ops have shapes the recorded one did not, and models fitted on a quick
sweep are far off at shapes they never saw: on the AMD host, the roofline of ``fully_connected`` fitted on the quick
sweep's 12 configs alone erred by 52% (GMAE) on the 13 shapes of the quickstart's workloads, ``bmm``'s backward by 28%
(``benchmarks/whatif_accuracy.py`` reports what-ifs with and without this step).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collectors.ops.from_traces import stored_tables
from collectors.ops.run import TraceSelection, run_ops
from collectors.ops.sweep import SweepOptions
from fitters.fit import FitOptions, fit_models, plan
from pmdb import platform as platforms
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store
from simulator.whatif_predict import Derived

FIT_BUDGET_MINUTES = 1.0   # the refit of the touched ops (their MLP/GBDT searches share it)


@dataclass
class MeasuredShapes:
    """What ``measure_shapes`` did: the ops run, configs measured and already stored, the ops refitted (their fit
    run) and the new model versions."""

    ops_run: str
    measured: int
    already: int
    refitted: list[str] = field(default_factory=list)
    fit_versions: int = 0
    notes: list[str] = field(default_factory=list)


def derived_tables(store: Store, derived: Derived) -> dict[int, list[dict[str, Any]]]:
    """rank -> the derived configuration's embedding tables {E, D, B, L, source} (the ops collector's form): sizes,
    batch and pooling as derived, the index source each table had when recorded (uniform where unknown)."""
    sources = {t["table"]: t["source"] for tables in stored_tables(store, derived.source.trace_set_id).values()
               for t in tables}
    out: dict[int, list[dict[str, Any]]] = {}
    for rank, tables in derived.embedding.per_rank.items():
        out[int(rank)] = [{"E": int(t["num_rows"]), "D": int(t["dim"]), "B": int(t["batch_size"]),
                           "L": max(round(float(t["pooling_mean"]), 2), 0.01),
                           "source": sources.get(int(t.get("table_index", -1)), "uniform")} for t in tables]
    return out


def check_local(store: Store, target: str) -> None:
    """Shapes can be measured only on this machine: the target must be this machine's platform."""
    mine = platforms.register_local(store)["name"]
    if mine != target:
        raise PmdbError(f"--measure-shapes runs kernels on this machine ({mine}), not on {target}: drop it, or "
                        f"predict for {mine}")


def measure_shapes(store: Store, workspace: Workspace, derived: list[Derived], platform: str, *,
                   threads: int | None = None, progress: bool = False,
                   fit_budget_minutes: float = FIT_BUDGET_MINUTES) -> MeasuredShapes:
    """Measure the derived graphs' op shapes missing from the store (warm and cold, ``threads`` intra-op threads as
    the recorded run had), then refit every op that got new configs (new versions; champions may move)."""
    graphs = [(d.source.trace_set_id, d.graph, derived_tables(store, d)) for d in derived]
    options = SweepOptions(threads=threads or 1, targets=[])
    done = run_ops(store, platform, options, TraceSelection(graphs=graphs), peaks=False, progress=progress)
    summary = done.summary
    new_ops = sorted({row["op"] for row in done.traced_counts if row["new"]})
    result = MeasuredShapes(done.run_id, int(summary.get("configs_done", 0)), int(summary.get("configs_resumed", 0)))
    fittable = []
    for op in new_ops:   # an op with too few rows in any cache state cannot be refitted: its models stay
        try:
            plan(store, platform, FitOptions(ops=[op]))
            fittable.append(op)
        except PmdbError:
            result.notes.append(f"{op} not refitted: too few measurements to fit (its models stay; a sweep "
                                f"adds more: `pmdb collect ops --op {op}`)")
    if fittable:
        versions, _ = fit_models(store, workspace, platform, FitOptions(
            ops=fittable, budget_minutes=fit_budget_minutes, progress=progress, figure_worker=False))
        result.refitted, result.fit_versions = fittable, len(versions)
    return result
