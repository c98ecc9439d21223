"""Model mode on a real 2-rank CPU step: whole-op models, overhead composition, roofline and trace fallbacks,
one batched call per model, and the stored prediction's links to the registered versions."""
from __future__ import annotations

import math
import re

import pytest
import torch

from collectors.ops.peaks import measure_peaks, store_peaks
from collectors.ops.timer import TimerSettings
from fitters.overheads import fit_overheads
from fitters.registry import Registry, VersionRecord
from fitters.roofline import uncalibrated
from simulator.engine import simulate
from pmdb.traces.from_store import load_graphs
from simulator.model_set import ModelRef, ModelSet, Overheads, platform_peaks
from pmdb.errors import PmdbError
from simulator.predict import pending_runs, predict_and_store, predict_trace_set
from simulator.semantics import SyncHost
from simulator.timing import ModelTiming

pytestmark = pytest.mark.slow  # uses the 2-rank recording


class CountingModel:
    """A real roofline model that counts the batched calls made to it."""

    def __init__(self, model):
        self.model, self.calls, self.rows = model, 0, 0

    def predict(self, frame):
        self.calls += 1
        self.rows += len(frame)
        return self.model.predict(frame)


def _count(ops, name: str) -> int:
    return sum((op.name == name) + _count(op.sub, name) for op in ops)


def _prepare_peaks(store, platform):
    rows = measure_peaks(torch.device("cpu"), gemm_n=256, stream_bytes=16 * 2 ** 20,
                         settings=TimerSettings(warmup=1, min_reps=3, max_reps=5, min_time_us=20_000.0))
    with store.run("peaks", platform, {}) as run:
        store_peaks(store, run.run_id, platform, rows)
    return platform_peaks(store, platform)


def _prepare(store, platform):
    peaks = _prepare_peaks(store, platform)
    with store.run("overheads", platform, {}) as run:
        fit_overheads(store, run.run_id, platform)
    return peaks


def _register(store, registry, platform, peaks) -> int:
    """A pure roofline for fully_connected forward, registered in MLflow and made champion."""
    name = f"pmdb.{platform}.fully_connected.fwd.cold"
    record = VersionRecord(name=name, platform=platform, op="fully_connected", family="roofline", pass_="fwd",
                           implementation="torch", dtype="float32", cache_state="cold",
                           metrics={"gmae": 0.2, "mape": 0.25, "std": 0.1})
    version = registry.log_version(store, None, record, uncalibrated("fully_connected", "fwd", "float32", peaks),
                                   [], {})
    registry.set_champion(store, name, version)
    return version


def test_model_timing_on_cpu_step(cpu_trace_set):
    store, ts, platform = cpu_trace_set
    peaks = _prepare(store, platform)
    fc = CountingModel(uncalibrated("fully_connected", "fwd", "float32", peaks))
    models = ModelSet(kernels={("fully_connected", "fwd", "torch"): ModelRef("t.fc.fwd", 7, fc, "roofline")},
                      peaks=peaks)
    graph = load_graphs(store, ts, pick="best", detail=True)[0]
    timing = ModelTiming(models, Overheads.latest(store, platform), "sync_host")
    result = simulate(timing.programs(graph), SyncHost())
    linears = sum(op.name == "aten::linear" for rg in graph.ranks for op in rg.ops)
    assert linears == 6  # two bottom layers and the top layer on each rank
    # backward nodes have no model here: they are composed of their nested ops, whose matrix products the
    # GEMM model predicts (dX and dW of the second and top layers, dW of the first: 5 per rank)
    nested_mm = sum(_count(op.sub, "aten::mm") for rg in graph.ranks for op in rg.ops if "Backward" in op.name)
    assert nested_mm == 10
    assert fc.calls == 1 and fc.rows == linears + nested_mm  # one batched call for every rank
    assert timing.usage.models == {("t.fc.fwd", 7): linears + nested_mm}
    fallback = {(u["op"], u["fallback"]) for u in timing.usage.unmodelled(graph.measured_us)}
    # no collective model was given: the collectives keep their traced times and are listed
    assert ("c10d::alltoall_base_", "trace") in fallback and ("c10d::allreduce_", "trace") in fallback
    shares = [u["measured_share"] for u in timing.usage.unmodelled(graph.measured_us)]
    assert all(s is not None and s >= 0 for s in shares)
    assert math.isfinite(result.predicted_us) and result.predicted_us > 0
    # overheads come from the same machine's traces, kernels from a pure roofline: the same order of magnitude as
    # measured. Not closer: the truth is two ranks recorded on 2 cores beside the other test worker, and one such
    # truth came out 3.6x the prediction (8.57 ms against 2.35, a fresh-clone `make test` of 2026-11-29 22:07)
    assert 0.1 < result.predicted_us / graph.measured_us < 10.0


def test_an_optimizer_range_adds_its_own_time_where_its_ops_enter_and_leave_it(cpu_trace_set):
    store, ts, platform = cpu_trace_set
    peaks = _prepare(store, platform)
    overheads = Overheads.latest(store, platform)
    graph = load_graphs(store, ts, pick="best", detail=True)[0]
    ranges = {op.step_range for rg in graph.ranks for op in rg.ops} - {None}
    assert ranges == {"Optimizer.step#SGD.step"}   # the recording's SGD step, on every rank
    enter, leave = overheads.get("Optimizer.step#SGD.step", "T2"), overheads.get("Optimizer.step#SGD.step", "T3")
    assert enter is not None and enter > 0 and leave is not None and leave >= 0
    models = ModelSet(kernels={}, peaks=peaks)
    with_ranges = [[t.t1 for t in program] for program in ModelTiming(models, overheads, "sync_host").programs(graph)]
    for rg in graph.ranks:
        for op in rg.ops:
            op.step_range = None
    without = [[t.t1 for t in program] for program in ModelTiming(models, overheads, "sync_host").programs(graph)]
    for rank, (a, b) in enumerate(zip(with_ranges, without)):
        added = [x - y for x, y in zip(a, b) if abs(x - y) > 1e-9]
        # one step per rank: the range's T2 before its first op, its T3 before the op after its last (or at the end)
        assert added == pytest.approx([enter, leave]) or added == pytest.approx([enter + leave]), rank


def test_model_mode_through_the_registry(cpu_trace_set):
    store, ts, platform = cpu_trace_set
    peaks = _prepare(store, platform)
    version = _register(store, Registry(store.workspace), platform, peaks)
    name = f"pmdb.{platform}.fully_connected.fwd.cold"
    with store.run("predict", platform, {}) as run:
        pid, pred = predict_and_store(store, run.run_id, trace_set_id=ts, mode="model")
    links = store.query("SELECT name, version, ops_predicted FROM prediction_models WHERE prediction_id = ?", [pid])
    assert links.values.tolist() == [[name, version, 16]]  # 6 linears and 10 nested matrix products
    row = store.query("SELECT * FROM v_predictions WHERE prediction_id = ?", [pid]).iloc[0]
    assert row["model_set"] == f"{name}:{version}"
    assert (row["selection_spec"], row["selection_cache_state"]) == ("champion", "default")
    assert re.fullmatch("[0-9a-f]{8}", row["selection_digest"]) and row["comm_shares_core"] in (True, False)
    assert store.scalar("SELECT model_set_id FROM v_prediction_errors WHERE prediction_id = ?", [pid]) == \
        pred.model_selection.label()  # the selection the error views group by
    assert row["overhead_version"] == Overheads.latest(store, platform).version
    assert row["measured_us"] == pytest.approx(store.scalar(
        "SELECT measured_us FROM trace_sets WHERE trace_set_id = ?", [ts]))
    assert row["iterations"] == 1 and row["isolated_us"] > 0 and row["predicted_us"] > 0
    assert {u["op"] for u in pred.unmodelled} >= {"c10d::alltoall_base_", "c10d::allreduce_"}


@pytest.mark.usefixtures("fit_workspace")   # the store's workspace with an empty MLflow store
def test_predict_all_follows_the_champions(store, cpu_trace_files):
    from sim_store import cpu_ranks, ingest
    from pmdb import platform as platforms

    platform = platforms.resolve(store, None)
    peaks = _prepare_peaks(store, platform)
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "other", "name": "two_rank_step", "config": {},
                                             "config_hash": "two-rank", "batch_size": 64, "world_size": 2},
                               returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 10, "warmup": 2, "measured_us": 12345.0})
    truth = run.run_id
    ingest(store, platform, cpu_ranks(cpu_trace_files), "two_rank_step", "captured", workload_id=wid)
    with store.run("overheads", platform, {}) as run:
        fit_overheads(store, run.run_id, platform)
    registry = Registry(store.workspace)
    first = _register(store, registry, platform, peaks)
    assert pending_runs(store, platform) == [truth]
    with store.run("predict", platform, {}) as run:
        pid, pred = predict_and_store(store, run.run_id, workload_run_id=truth)
    assert pred.workload_run_id == truth and pred.measured_us == 12345.0
    assert pending_runs(store, platform) == []
    second = _register(store, registry, platform, peaks)  # a new champion: the run is pending again
    assert second == first + 1
    assert pending_runs(store, platform) == [truth]


def test_cross_platform_cpu_trace_with_gpu_models(cpu_trace_set):
    """A trace recorded here, predicted with another platform's models and semantics (--target-platform)."""
    from pmdb import platform as platforms

    store, ts, source = cpu_trace_set
    target = platforms.ensure_named(store, "gpu-target", device_kind="cuda")
    peaks = {"gemm_flops": 1e13, "mem_bw": 5e11}  # a GPU's peaks, as `collect peaks` would store them there
    with store.run("peaks", target, {}) as run:
        store.insert("platform_peaks", [{"platform": target, "run_id": run.run_id, "metric": m, "dtype": "float32",
                                         "value": v} for m, v in peaks.items()])
    version = _register(store, Registry(store.workspace), target, peaks)
    pred = predict_trace_set(store, ts, mode="model", target_platform=target)
    assert (pred.source_platform, pred.target_platform) == (source, target)
    # a GPU target models whole top-level ops (no composition from nested CPU ops): the 6 linears; of the 6
    # backward GEMM nodes, the 2 first layers' compute the weight gradient only (one forward-shaped GEMM, priced by
    # the forward model as such), the other 4 have no model of their own there: the forward model prices them,
    # scaled by the roofline ratio of the passes (twice the work)
    assert [(m.name, m.version, m.ops_predicted) for m in pred.models] == [
        (f"pmdb.{target}.fully_connected.fwd.cold", version, 12)]
    scaled = {u["op"]: u["count"] for u in pred.unmodelled if u["fallback"] == "scaled-fwd"}
    assert scaled["autograd::engine::evaluate_function: AddmmBackward0"] == 4
    # async semantics: the modelled ops became kernels on the compute stream, the collectives on the comm stream
    rank = pred.result.ranks[0]
    assert rank.compute_kernel_us > 0 and rank.comm_kernel_us > 0
    lender = store.scalar("SELECT max(overhead_version) FROM v_overhead_versions WHERE platform = 'nvidia-h200'")
    assert pred.overhead_version == lender  # the target has no table: today's host path lends one (default lender)
    assert pred.measured_us is None       # and no measured run of this workload
    with pytest.raises(PmdbError, match="replay mode takes every time from the trace"):
        predict_trace_set(store, ts, mode="replay", target_platform=target)
