"""Exact-shape pricing from rows mined from GPU traces: the shared PARAM linear trace (RTX 2080 Ti, Kineto + ET) is
imported and mined with the real miner once per module, and predicted in model mode without any kernel model.
Every op whose exact shape was mined is priced by the median of its mined calls (a GPU trace records no intra-op
threads: they are not part of the match), labelled 'mined-self' when the rows came from the very trace set
predicted (in-sample) and 'mined' when they came from another; the stored prediction counts and lists them."""
from __future__ import annotations

import json
import statistics
from dataclasses import replace

import pytest

from collectors.traces.ingest import ingest_trace_set
from collectors.traces.kernel_rows import mine_traces, shape_key
from harness import copy_workspace, parsed_gpu_trace
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import Stream
from pmdb.traces.opmap import Mapped, map_op
from simulator.embedding_stats import EmbeddingStats
from simulator.measured_shapes import MINED, MINED_SELF, MinedShape, ShapeMedians, load_mined
from simulator.model_set import ModelSelection, ModelSet, Overheads
from simulator.session import PredictionSession
from simulator.store_rows import store_prediction
from simulator.timing import ModelTiming

GPU = "rtx2080ti"


@pytest.fixture(scope="module")
def _built(tmp_path_factory) -> dict:
    return {}


@pytest.fixture
def mined(_built, shared_data, tmp_path_factory) -> tuple[Workspace, int]:
    """(workspace, trace set), built once per module: the PARAM linear trace imported on a GPU platform and
    mined."""
    if "ws" not in _built:
        folder = shared_data / "traces" / "gpu" / "param_linear"
        if not folder.is_dir():
            pytest.skip(f"{folder} not present")
        ws = Workspace(tmp_path_factory.mktemp("mined") / "ws")
        with Store.open(ws, create=True) as store:
            platforms.ensure_named(store, GPU, device_kind="cuda")
            with store.run("trace", GPU, {}) as run:
                ranks = parsed_gpu_trace(tmp_path_factory, "param_linear")   # parsed once per test run
                trace_set = ingest_trace_set(store, run.run_id, GPU, ranks, label="param_linear", source="imported")
            mine_traces(store, [trace_set])
        _built["ws"] = (ws, trace_set)
    return _built["ws"]


@pytest.fixture
def opened(mined):
    """(store opened read-only, mined trace set)."""
    ws, trace_set = mined
    with Store.open(ws, read_only=True) as store:
        yield store, trace_set


def _mined_medians(store, trace_set: int) -> dict[str, float]:
    """shape key -> median µs of the rows mined from ``trace_set``, straight from op_measurements."""
    rows = store.query("SELECT m.op, m.pass, CAST(m.params AS VARCHAR) AS params, m.median_us FROM op_measurements m "
                       "JOIN traces t ON t.trace_id = m.trace_id WHERE m.source = 'trace' AND t.trace_set_id = ?",
                       [trace_set])
    times: dict[str, list[float]] = {}
    for op, pass_, text, us in zip(rows["op"], rows["pass"], rows["params"], rows["median_us"]):
        times.setdefault(shape_key(op, pass_, json.loads(text)), []).append(float(us))
    return {key: statistics.median(values) for key, values in times.items()}


def _timing(store, graph, measured: ShapeMedians | None) -> ModelTiming:
    """Model-mode timing of ``graph`` on the GPU platform with no kernel model at all (threads unknown)."""
    models = ModelSet(kernels={}, peaks={}, selection=ModelSelection("champion", "device", "0"))
    timing = ModelTiming(models, Overheads(), "async_device", measured=measured, threads=None)
    timing.programs(graph)
    return timing


def test_mined_rows_price_the_ops_of_their_shapes(opened):
    store, ts = opened
    expected = _mined_medians(store, ts)
    assert expected
    graph = load_graphs(store, ts, pick="best")[0]
    exact = _timing(store, graph, ShapeMedians.load(store, GPU))
    plain = _timing(store, graph, None)             # --kernels models: nothing mined prices anything
    priced = 0
    for op in graph.ranks[0].ops:
        mapped = map_op(op)
        if not isinstance(mapped, Mapped) or not op.kernels:
            continue
        key = shape_key(mapped.op, mapped.pass_, mapped.params)
        if key not in expected:
            continue
        priced += 1
        assert exact.priced_by[id(op)] == MINED_SELF
        assert exact._time[id(op)] == pytest.approx(expected[key])
        assert plain.priced_by.get(id(op)) != MINED_SELF
    assert priced > 10
    assert exact.usage.measured == priced and plain.usage.measured == 0
    listed = {kind: entry for (name, kind), entry in exact.usage.fallback.items() if kind == MINED_SELF}
    assert listed
    assert sum(int(entry[0]) for (_, kind), entry in exact.usage.fallback.items() if kind == MINED_SELF) == priced
    # the mined median of an op's own calls is close to its traced device time (3 iterations of one program)
    traced = sum(k.dur_us or 0.0 for op in graph.ranks[0].ops if id(op) in exact.priced_by
                 for k in op.kernels if k.stream == Stream.COMPUTE)
    assert sum(exact._time[i] for i, label in exact.priced_by.items() if label == MINED_SELF) == \
        pytest.approx(traced, rel=0.2)


def test_rows_mined_from_another_trace_set_are_not_in_sample(opened):
    store, ts = opened
    graph = replace(load_graphs(store, ts, pick="best")[0], trace_set_id=ts + 1)  # as another set of the program
    timing = _timing(store, graph, ShapeMedians.load(store, GPU))
    labels = set(timing.priced_by.values())
    assert MINED in labels and MINED_SELF not in labels
    assert MINED in {kind for _, kind in timing.usage.fallback}


def test_prediction_stores_what_priced_the_ops(mined, tmp_path):
    ws, ts = mined
    with Store.open(Workspace(copy_workspace(ws.home, tmp_path / "ws"))) as store:
        _predict_and_store(store, ts)


def _predict_and_store(store, ts: int) -> None:
    graph = load_graphs(store, ts, pick="best")[0]
    for kernels in ("measured", "models"):
        session = PredictionSession(store, GPU, kernels=kernels)
        pred = session.prediction(graph, EmbeddingStats(), source_platform=GPU, trace_set_id=ts)
        with store.run("predict", GPU, {}) as run:
            store_prediction(store, run.run_id, pred)
    rows = store.query("SELECT prediction_id, measured_ops, CAST(unmodelled AS VARCHAR) AS unmodelled, "
                       "self_priced_share FROM predictions ORDER BY prediction_id")
    measured, models = rows.iloc[0], rows.iloc[1]
    assert int(measured["measured_ops"]) > 10 and int(models["measured_ops"]) == 0
    kinds = {r["fallback"] for r in json.loads(measured["unmodelled"])}
    assert MINED_SELF in kinds
    assert MINED_SELF not in {r["fallback"] for r in json.loads(models["unmodelled"])}
    mined_ops = sum(r["count"] for r in json.loads(measured["unmodelled"]) if r["fallback"] == MINED_SELF)
    assert mined_ops == int(measured["measured_ops"])
    # without the mined rows (and no model) those ops keep their traced times: replay, not a model
    assert "trace" in {r["fallback"] for r in json.loads(models["unmodelled"])}
    # rows mined from this very trace set price it in-sample: as self-priced as its traced times (left out of
    # model error statistics), with the mined ops' share counted
    mined_share = sum(r.get("predicted_share") or 0.0 for r in json.loads(measured["unmodelled"])
                      if r["fallback"] == MINED_SELF)
    self_share = sum(r.get("predicted_share") or 0.0 for r in json.loads(measured["unmodelled"])
                     if r["fallback"] in ("trace", MINED_SELF))
    assert mined_share > 0.5
    assert float(measured["self_priced_share"]) == pytest.approx(self_share)


def test_a_shape_mined_in_two_dtypes_is_left_to_the_models(mined, tmp_path):
    ws, _ = mined
    with Store.open(Workspace(copy_workspace(ws.home, tmp_path / "ws"))) as store:
        _two_dtypes(store)


def _two_dtypes(store) -> None:
    before = load_mined(store, GPU)
    one = store.query("SELECT measurement_id, op, pass, CAST(params AS VARCHAR) AS params FROM op_measurements "
                      "WHERE source = 'trace' ORDER BY measurement_id LIMIT 1").iloc[0]
    store.conn.execute("UPDATE op_measurements SET dtype = 'float16' WHERE measurement_id = ?",
                       [int(one["measurement_id"])])
    key = (shape_key(one["op"], one["pass"], json.loads(one["params"])), "device")
    calls = int(store.scalar("SELECT count(*) FROM op_measurements WHERE source = 'trace' AND op = ? AND pass = ? "
                             "AND CAST(params AS VARCHAR) = ?", [one["op"], one["pass"], one["params"]]))
    after = load_mined(store, GPU)
    assert key in before and before[key].calls == calls
    assert (key not in after) == (calls > 1)


def test_microbenchmarks_win_and_threads_only_match_them():
    shape = {"M": 8, "N": 4, "K": 2}
    key = shape_key("fully_connected", "fwd", shape)
    medians = ShapeMedians({}, None, {(key, "device"): MinedShape(12.5, 3, frozenset({4}))})
    assert medians.priced("fully_connected", "fwd", None, shape, None, "device", 4) == (12.5, MINED_SELF)
    assert medians.priced("fully_connected", "fwd", None, shape, 2, "device", 5) == (12.5, MINED)
    assert medians.priced("fully_connected", "fwd", None, shape, None, "cold", 4) is None
    assert medians.priced("fully_connected", "bwd", None, shape, None, "device", 4) is None
    assert medians.time("fully_connected", "fwd", None, {**shape, "M": 9}, None, "device") is None
    # the same shape microbenchmarked at 2 threads prices it at 2 threads; at other counts the mined rows do
    bench = medians._key("fully_connected", "fwd", None, shape, 2)
    assert bench is not None
    medians.medians[(bench, "device")] = 10.0
    assert medians.priced("fully_connected", "fwd", None, shape, 2, "device", 4) == (10.0, "measured")
    assert medians.priced("fully_connected", "fwd", None, shape, 1, "device", 4) == (12.5, MINED_SELF)
    assert medians.priced("fully_connected", "fwd", None, shape, None, "device", 4) == (12.5, MINED_SELF)


def test_predict_prints_the_mined_ops(mined, tmp_path, capsys, monkeypatch):
    """`pmdb predict` lists the ops mined rows priced, with their count, in its table of ops no model priced."""
    monkeypatch.setenv("COLUMNS", "80")
    ws, ts = mined
    home = copy_workspace(ws.home, tmp_path / "ws")
    assert main(["--home", str(home), "predict", "--trace-set", str(ts)]) == 0
    lines = capsys.readouterr().out.splitlines()
    counts = [int(words[words.index(MINED_SELF) - 1]) for words in map(str.split, lines) if MINED_SELF in words]
    assert counts and min(counts) > 0, lines
    assert max(map(len, lines)) <= 80, [line for line in lines if len(line) > 80]
    with Store.open(Workspace(home), read_only=True) as store:
        assert int(store.scalar("SELECT measured_ops FROM predictions")) >= sum(counts)
