"""Exact-shape pricing (``--kernels measured``) on a real 2-rank CPU step: the linears whose shapes ``collect ops``
measured from the trace are priced by their stored medians, everything else by the models; the prediction
records the choice, the measurements it could use and how many ops they priced, and a newer measurement makes
``predict --all`` predict again."""
from __future__ import annotations

import json
import statistics

import pytest

from collectors.ops.run import TraceSelection, run_ops
from collectors.ops.sweep import SweepOptions
from collectors.ops.timer import TimerSettings
from fitters.roofline import uncalibrated
from pmdb.errors import PmdbError
from pmdb.traces.from_store import load_graphs
from pmdb.traces.opmap import Mapped, map_op
from simulator.measured_shapes import ShapeMedians, check_kernels, latest_measurement
from simulator.model_set import ModelRef, ModelSelection, ModelSet, Overheads, platform_peaks
from simulator.session import PredictionSession
from simulator.store_rows import store_prediction
from simulator.timing import ModelTiming

pytestmark = pytest.mark.slow  # uses the 2-rank recording

FAST = TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time_us=1.0)


def _measure_linears(store, platform, ts) -> None:
    options = SweepOptions(ops=["fully_connected"], cache="cold", threads=1, targets=[], settings=FAST)
    run_ops(store, platform, options, TraceSelection(trace_set_id=ts), peaks=True, progress=False)


def _linears(graph):
    return [op for rg in graph.ranks for op in rg.ops
            if isinstance(map_op(op), Mapped) and map_op(op).op == "fully_connected"]


def test_measured_shapes_price_the_linears(cpu_trace_set):
    store, ts, platform = cpu_trace_set
    _measure_linears(store, platform, ts)
    peaks = platform_peaks(store, platform)
    roofline = uncalibrated("fully_connected", "fwd", "float32", peaks)
    models = ModelSet(kernels={("fully_connected", "fwd", "torch"): ModelRef("t.fc", 1, roofline, "roofline",
                                                                              "cold")},
                      peaks=peaks, selection=ModelSelection("t", "default", "0"))
    measured = ShapeMedians.load(store, platform)
    assert len(measured) > 0 and measured.upto == latest_measurement(store, platform)
    graph = load_graphs(store, ts, pick="best", detail=True)[0]
    linears = [op for op in _linears(graph) if map_op(op).pass_ == "fwd"]
    assert linears

    exact = ModelTiming(models, Overheads(), "sync_host", measured=measured, threads=1)
    exact.programs(graph)
    plain = ModelTiming(models, Overheads(), "sync_host", measured=measured, threads=None)  # unknown threads
    plain.programs(graph)
    for op in linears:
        mapped = map_op(op)
        rows = store.query(
            "SELECT CAST(params AS VARCHAR) AS params, median_us FROM op_measurements WHERE platform = ? "
            "AND op = 'fully_connected' AND pass = 'fwd' AND cache_state = 'cold' AND threads = 1", [platform])
        stored = [us for text, us in zip(rows["params"], rows["median_us"])
                  if {k: float(v) for k, v in json.loads(text).items()} ==
                  {k: float(v) for k, v in mapped.params.items()}]
        assert stored, f"shape {mapped.params} was not measured"
        assert exact.priced_by[id(op)] == "measured" and plain.priced_by[id(op)] == "t.fc:1"
        assert exact._time[id(op)] == pytest.approx(statistics.median(stored))
        assert exact._time[id(op)] != pytest.approx(plain._time[id(op)], rel=1e-6)
    assert exact.usage.measured >= len(linears) and plain.usage.measured == 0
    # the model priced only what was not measured; a measured backward linear is priced whole, not by its
    # nested GEMMs (which the model would price)
    assert exact.usage.models.get(("t.fc", 1), 0) < plain.usage.models[("t.fc", 1)]
    backward = [op for op in _linears(graph) if map_op(op).pass_ == "bwd"]
    assert backward and all(exact.priced_by.get(id(op)) == "measured" for op in backward)
    assert not any(id(op) in plain.priced_by for op in backward)
    # another thread count measured nothing
    other = ModelTiming(models, Overheads(), "sync_host", measured=measured, threads=2)
    other.programs(graph)
    assert other.usage.measured == 0


def test_prediction_records_kernels_and_freshness(cpu_trace_set):
    from simulator.pending import _fresh

    store, ts, platform = cpu_trace_set
    _measure_linears(store, platform, ts)
    graph = load_graphs(store, ts, pick="best", detail=True)[0]
    from simulator.embedding_stats import EmbeddingStats

    for kernels in ("measured", "models"):
        session = PredictionSession(store, platform, kernels=kernels)
        pred = session.prediction(graph, EmbeddingStats(), source_platform=platform, trace_set_id=ts, threads=1)
        with store.run("predict", platform, {}) as run:
            store_prediction(store, run.run_id, pred)
    rows = store.query("SELECT selection_kernels, measurements_upto, measured_ops FROM predictions "
                       "ORDER BY prediction_id")
    assert rows["selection_kernels"].tolist() == ["measured", "models"]
    assert int(rows["measurements_upto"][0]) == latest_measurement(store, platform)
    assert rows["measurements_upto"].isna().tolist() == [False, True]
    assert int(rows["measured_ops"][0]) > 0 and int(rows["measured_ops"][1]) == 0
    assert ts in _fresh(store, platform, "champion", None, "trace_set_id", "measured")
    # a newer measurement of the platform: the measured prediction is no longer current, the models' one is
    options = SweepOptions(ops=["relu"], cache="cold", threads=1, max_configs=1, settings=FAST)
    run_ops(store, platform, options, peaks=False, progress=False)
    assert ts not in _fresh(store, platform, "champion", None, "trace_set_id", "measured")
    assert ts in _fresh(store, platform, "champion", None, "trace_set_id", "models")


def test_bad_kernels_choice_is_one_line():
    with pytest.raises(PmdbError, match="bad --kernels 'exact': use measured or models"):
        check_kernels("exact")
