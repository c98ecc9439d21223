"""Host waits are not work: a synchronize call between two kernel launches of one op makes the host wait for the
device there; its duration is neither CPU time before the next launch nor part of the op's tail (T3). A Kineto
trace built by hand in torch.profiler's layout (one op: launch, cudaStreamSynchronize, launch), and the shared A100
trace whose host blocks on stream, event and device synchronizes."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from collectors.traces.ingest import RankTraces, ingest_trace_set
from pmdb import platform as platforms
from pmdb.platform import Semantics
from pmdb.traces.from_store import load_graphs
from pmdb.traces.graph import Stream
from simulator import semantics as sem_mod
from simulator.engine import simulate
from simulator.predict import predict_trace_set
from simulator.replay import replay_programs

STEP_US = 200.0


def _event(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1 if cat not in ("kernel", "cuda_sync") else 0,
            "tid": tid, "ts": ts, "dur": dur, "args": args}


def _trace() -> dict:
    """aten::index: launch k1 (60 µs), wait for it (cudaStreamSynchronize, 62 µs), launch k2; then aten::add."""
    events = [
        _event("user_annotation", "ProfilerStep#1", 1000, STEP_US),
        _event("cpu_op", "aten::index", 1000, 120, **{"External id": 1}),
        _event("cuda_runtime", "cudaLaunchKernel", 1005, 5, correlation=11, **{"External id": 1}),
        _event("kernel", "index_kernel_1", 1012, 60, tid=7, stream=7, device=0, correlation=11),
        _event("cuda_runtime", "cudaStreamSynchronize", 1012, 62, correlation=12, **{"External id": 1}),
        _event("cuda_sync", "Stream Sync", 1012, 62, tid=7, stream=7, device=0, correlation=12),
        _event("cuda_runtime", "cudaLaunchKernel", 1080, 5, correlation=13, **{"External id": 1}),
        _event("kernel", "index_kernel_2", 1086, 30, tid=7, stream=7, device=0, correlation=13),
        _event("cpu_op", "aten::add", 1130, 20, **{"External id": 2}),
        _event("cuda_runtime", "cudaLaunchKernel", 1135, 5, correlation=14, **{"External id": 2}),
        _event("kernel", "add_kernel", 1141, 10, tid=7, stream=7, device=0, correlation=14),
    ]
    return {"schemaVersion": 1, "traceEvents": events}


def _store_trace(store, path: Path, platform: str) -> int:
    platforms.ensure_named(store, platform, device_kind="cuda")
    with store.run("trace", platform, {}) as run:
        return ingest_trace_set(store, run.run_id, platform, [RankTraces(0, path, None)], label="host_wait",
                                source="imported")


def test_a_wait_between_launches_is_a_host_wait_not_cpu_time(store, tmp_path):
    path = tmp_path / "kineto.json"
    path.write_text(json.dumps(_trace()))
    ts = _store_trace(store, path, "gpu-hand")
    graph = load_graphs(store, ts)[0]
    index = graph.ranks[0].ops[0]
    assert index.name == "aten::index"
    first, second = index.kernels
    assert second.waits_before == (Stream.COMPUTE,)               # the host waited for k1 before launching k2
    assert second.gap_before_us == pytest.approx(1080 - 1010 - 62)  # 70 µs between launches, less the 62 µs wait
    assert index.tail_us == pytest.approx(1120 - 1085)              # the wait is not in the tail either
    sem = sem_mod.get(Semantics.ASYNC_DEVICE)
    replayed = simulate(replay_programs(graph, Semantics.ASYNC_DEVICE), sem).predicted_us
    assert replayed == pytest.approx(STEP_US, rel=0.03)
    # the wait follows the device: with k1 50 µs longer the step is ~50 µs longer (as CPU work it would not be)
    first.dur_us += 50.0
    longer = simulate(replay_programs(graph, Semantics.ASYNC_DEVICE), sem)
    assert longer.predicted_us - replayed == pytest.approx(50.0, abs=3.0) and longer.ranks[0].external_waits == 0
    # with k1 50 µs shorter, the rank's own work no longer explains the traced 62 µs wait: replay keeps the wait as
    # traced, the part beyond its own work an external wait (simulator.replay)
    first.dur_us -= 100.0
    shorter = simulate(replay_programs(graph, Semantics.ASYNC_DEVICE), sem)
    assert shorter.predicted_us == pytest.approx(STEP_US, rel=0.03) and shorter.ranks[0].external_waits == 1


def test_shared_cuda_sync_trace_replays_within_3_percent(store, shared_data, tmp_path):
    folder = shared_data / "traces" / "gpu" / "hta_cuda_sync"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    ts = _store_trace(store, folder / "kineto.json.gz", "a100-hta")
    graph = load_graphs(store, ts)[0]
    waits = [op for op in graph.ranks[0].ops if op.sync_streams or op.kernel_waits()]
    assert waits, "the trace blocks the host on stream, event and device synchronizes"
    pred = predict_trace_set(store, ts, mode="replay")
    assert pred.measured_us and abs(pred.rel_error) < 0.03, pred.rel_error
