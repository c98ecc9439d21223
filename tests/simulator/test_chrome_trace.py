"""`pmdb predict --export-trace FILE`: the simulated iteration as a Chrome trace (traceEvents). Real shared GPU traces
(HolisticTraceAnalysis's 2-rank NCCL sample, PARAM's linear), a real 2-rank gloo recording, real store and MLflow
registry; the written file is read back and checked against what predict printed and what the trace measured."""
from __future__ import annotations

import gzip
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest

from collectors.traces.ingest import RankTraces
from fitters.overheads import fit_overheads
from fitters.registry import Registry, VersionRecord
from fitters.roofline import uncalibrated
from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.traces.from_store import load_graphs
from sim_store import ingest
from simulator.engine import TimedOp, Timeline, simulate
from simulator.semantics import COMM, COMPUTE, AsyncDevice, SyncHost

HTA = "a100-hta"


def _late_rank(compute_us: float) -> list[TimedOp]:
    """compute, an all_reduce, a consumer of its output (T1 2 µs, T3 1 µs each)."""
    return [TimedOp(t1=2.0, t3=1.0, kernels=((COMPUTE, compute_us, 0.0, 0.0),)),
            TimedOp(t1=2.0, t3=1.0, kernels=((COMM, 50.0, 0.0, 0.0),), is_collective=True),
            TimedOp(t1=2.0, t3=1.0, kernels=((COMPUTE, 10.0, 0.0, 0.0),), waits_on=(1,))]


def test_recording_changes_nothing_and_places_every_op():
    """Worked by hand: sync host, rank 0 computes 100 µs, rank 1 300 µs; the all_reduce ends when rank 1's does."""
    programs = [_late_rank(100.0), _late_rank(300.0)]
    timeline = Timeline()
    recorded = simulate(programs, SyncHost(), timeline)
    assert [r.as_dict() for r in recorded.ranks] == [r.as_dict() for r in simulate(programs, SyncHost()).ranks]
    first, coll, consumer = timeline.ranks[0]
    # rank 0: op 0 runs 2..102 (+T3: 103); the all_reduce is handed over at 105, waits for rank 1's
    # (305..355 there) and ends at 355 on both; the consumer waits for it from 106 to 355, T1, then 357..367
    assert (first.begin, first.end) == (2.0, 103.0)
    assert first.kernels == [(COMPUTE, 2.0, 102.0, 100.0)]
    assert coll.kernels == [(COMM, 105.0, 355.0, 50.0)] and coll.end == 106.0
    assert (consumer.arrive, consumer.synced, consumer.begin, consumer.end) == (106.0, 355.0, 357.0, 368.0)
    assert timeline.ranks[1][1].kernels == [(COMM, 305.0, 355.0, 50.0)]
    assert recorded.predicted_us == 368.0


def test_async_streams_held_by_a_sync_are_recorded():
    timeline = Timeline()
    simulate([_late_rank(100.0)], AsyncDevice(), timeline)
    coll, consumer = timeline.ranks[0][1:]
    # compute kernel 2..102 (launched after T1); the all_reduce first aligns the idle comm stream to 102
    assert coll.stream_waits == [(COMM, 0.0, 102.0)]
    assert coll.kernels == [(COMM, 103.0, 153.0, 50.0)]
    # the consumer of its output holds the compute stream from 102 until the all_reduce ends
    assert consumer.stream_waits == [(COMPUTE, 102.0, 153.0)]


def _load(path: Path) -> dict:
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)


def _complete(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e["ph"] == "X"]


def _disjoint(events: list[dict]) -> bool:
    """Events of one thread in time order never overlap (3-decimal µs rounding tolerated)."""
    ordered = sorted(events, key=lambda e: e["ts"])
    return all(b["ts"] >= a["ts"] + a["dur"] - 2e-3 for a, b in zip(ordered, ordered[1:]))


def _by_thread(events: list[dict], cat: str) -> dict[tuple[int, int], list[dict]]:
    out: dict[tuple[int, int], list[dict]] = defaultdict(list)
    for e in events:
        if e["cat"] == cat:
            out[(e["pid"], e["tid"])].append(e)
    return out


def _thread_names(doc: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}


def _predict(home: Path, capsys, *args: str) -> dict:
    """`pmdb predict ... --format json`: the printed summary row."""
    capsys.readouterr()
    assert main(["--home", str(home), "predict", *args, "--format", "json"]) == 0
    out = capsys.readouterr()
    assert "simulated timeline" in out.err
    return json.loads(out.out)[0]


@pytest.fixture
def hta_two_ranks(store, fit_workspace, shared_data) -> tuple[int, str, int]:
    """HTA's 2-rank sample (NCCL all_to_all and all_reduce) on an imported A100 platform, with its overheads fitted,
    peaks and a registered fully_connected backward model: (trace set, model name, version). The store's workspace
    is ``fit_workspace`` (an empty MLflow store copied in)."""
    folder = shared_data / "traces" / "gpu" / "hta_128rank_sampled"
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    platforms.ensure_named(store, HTA, device_kind="cuda")
    ts = ingest(store, HTA, [RankTraces(r, folder / f"rank{r}.kineto.json.gz", None) for r in (0, 1)],
                "hta_two_ranks", "imported")
    with store.run("overheads", HTA, {}) as run:
        fit_overheads(store, run.run_id, HTA)
    peaks = {"gemm_flops": 1.5e14, "mem_bw": 1.5e12}
    with store.run("peaks", HTA, {}) as run:
        store.insert("platform_peaks", [{"platform": HTA, "run_id": run.run_id, "metric": m, "dtype": "float32",
                                         "value": v} for m, v in peaks.items()])
    name = f"pmdb.{HTA}.fully_connected.bwd.cold"
    record = VersionRecord(name=name, platform=HTA, op="fully_connected", family="roofline", pass_="bwd",
                           implementation="torch", dtype="float32", cache_state="cold",
                           metrics={"gmae": 0.2, "mape": 0.25, "std": 0.1})
    registry = Registry(store.workspace)
    version = registry.log_version(store, None, record, uncalibrated("fully_connected", "bwd", "float32", peaks),
                                   [], {})
    registry.set_champion(store, name, version)
    return ts, name, version


def test_two_gpu_ranks_model_mode(store, hta_two_ranks, shared_data, tmp_path, capsys):
    ts, name, version = hta_two_ranks
    out = tmp_path / "predicted.json.gz"
    row = _predict(store.workspace.home, capsys, "--trace-set", str(ts), "--export-trace", str(out))
    assert out.read_bytes()[:2] == b"\x1f\x8b"   # gzipped because the name ends in .gz
    doc = _load(out)
    events = _complete(doc)
    assert events and all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in events)
    # one process per rank, named; a host thread and both streams each
    names = {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name"}
    assert names == {0: "rank 0 (predicted)", 1: "rank 1 (predicted)"}
    assert {e["pid"] for e in events} == {0, 1}
    threads = _thread_names(doc)
    assert sorted(threads.values()) == sorted(["host thread", "compute stream", "communication stream"] * 2)
    tid = {v: t for (p, t), v in threads.items() if p == 0}
    # the engine serialises each stream and the host thread: no two ops overlap on one of them
    kernels, cpu_ops = _by_thread(events, "kernel"), _by_thread(events, "cpu_op")
    assert set(kernels) == {(r, tid[s]) for r in (0, 1) for s in ("compute stream", "communication stream")}
    assert all(_disjoint(evs) for evs in [*kernels.values(), *cpu_ops.values()])
    # the timeline spans the isolated iteration predict printed (last end over ranks; steady state in otherData)
    isolated = row["isolated_ms"] * 1000
    assert min(e["ts"] for e in events) >= 0
    assert max(e["ts"] + e["dur"] for e in events) == pytest.approx(isolated, rel=0.01)
    assert doc["otherData"]["steady_state_us"] == pytest.approx(row["predicted_ms"] * 1000, rel=1e-3)
    assert doc["otherData"]["mode"] == "model" and doc["otherData"]["trace_set"] == ts
    # every op the engine scheduled is there: one host event per traced op of each rank
    graph = load_graphs(store, ts, pick="best")[0]
    for rank in (0, 1):
        assert [e["name"] for e in sorted(cpu_ops[(rank, tid["host thread"])], key=lambda e: e["args"]["index"])] \
            == [op.name for op in graph.ranks[rank].ops]
    host = [e for evs in cpu_ops.values() for e in evs]
    # traced µs wherever the trace timed it (a Kineto trace times every op and kernel), with the error
    gpu = [e for evs in kernels.values() for e in evs]
    assert all("traced_us" in e["args"] for e in host + gpu)
    assert all(e["args"]["error_pct"] == pytest.approx(
        100 * (e["args"]["predicted_us"] - e["args"]["traced_us"]) / e["args"]["traced_us"], abs=0.02)
        for e in host + gpu if e["args"]["traced_us"] > 0)
    # what priced each op: the registered version for the GEMM backward kernels, the overhead table for the host
    by_model = [e for e in gpu if e["args"]["priced_by"] == f"{name}:{version}"]
    assert by_model and {e["args"]["op"] for e in by_model} >= {
        "autograd::engine::evaluate_function: AddmmBackward0"}
    assert all(e["args"]["priced_by"].startswith("overheads:") for e in host)
    # collectives on the communication stream, and their waits for the peer rank nested inside them
    comm = kernels[(0, tid["communication stream"])]
    assert {e["args"]["collective"] for e in comm} >= {"all_to_all"}
    waits = [e for e in events if e["cat"] == "wait" and e["name"] == "wait for peers"]
    assert waits
    for w in waits:
        parent = [c for c in kernels[(w["pid"], w["tid"])] if c["ts"] <= w["ts"] and
                  w["ts"] + w["dur"] <= c["ts"] + c["dur"] + 2e-3]
        assert len(parent) == 1 and parent[0]["args"]["wait_for_peers_us"] == pytest.approx(w["dur"], abs=2e-3)
    # the names are the measured trace's: both open side by side and search alike
    measured = json.loads(gzip.decompress(
        (shared_data / "traces" / "gpu" / "hta_128rank_sampled" / "rank0.kineto.json.gz").read_bytes()))
    known = {e.get("name") for e in measured["traceEvents"]}
    assert {e["name"] for e in events if e["pid"] == 0 and e["cat"] in ("cpu_op", "kernel")} <= known


def test_replay_exports_the_median_iteration(store, gpu_trace, tmp_path, capsys):
    ts = gpu_trace("param_linear", "rtx-linear")
    out = tmp_path / "replayed.json"
    row = _predict(store.workspace.home, capsys, "--trace-set", str(ts), "--mode", "replay",
                   "--export-trace", str(out))
    doc = _load(out)   # plain JSON
    events = _complete(doc)
    assert doc["otherData"]["iterations_predicted"] > 1
    step = [e for e in events if e["name"].startswith("ProfilerStep#")]
    assert len(step) == 1 and step[0]["dur"] == pytest.approx(row["isolated_ms"] * 1000, rel=1e-3)
    host = [e for e in events if e["cat"] == "cpu_op"]
    # every time comes from the trace: each op's predicted time is its traced one
    assert host and all(e["args"]["priced_by"] == "trace (replay)" for e in host)
    assert all(e["args"]["predicted_us"] == pytest.approx(e["args"]["traced_us"], abs=1e-3) for e in host)
    assert all(_disjoint(evs) for key, evs in _by_thread(events, "kernel").items())
    assert all(step[0]["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step[0]["ts"] + step[0]["dur"] + 2e-3
               for e in host)


@pytest.mark.parametrize("extra, message", [
    (["--all"], "--export-trace writes one prediction"),
    (["--trace-set", "1"], "no such directory"),
])
def test_export_mistakes_are_one_line(workspace, tmp_path, capsys, extra, message):
    target = tmp_path / "missing" / "t.json" if "--trace-set" in extra else tmp_path / "t.json"
    code = main(["--home", str(workspace.home), "predict", *extra, "--export-trace", str(target)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("pmdb: error:") and message in err[0]
    assert not target.exists()


@pytest.mark.slow  # records the 2-rank gloo step
def test_two_cpu_ranks_sync_host(cpu_trace_set, tmp_path, capsys):
    store, ts, platform = cpu_trace_set
    with store.run("overheads", platform, {}) as run:
        fit_overheads(store, run.run_id, platform)
    out = tmp_path / "cpu.json"
    row = _predict(store.workspace.home, capsys, "--trace-set", str(ts), "--export-trace", str(out))
    doc = _load(out)
    events = _complete(doc)
    threads = _thread_names(doc)
    assert sorted(threads.values()) == sorted(["calling thread (compute)", "communication thread"] * 2)
    tid = {v: t for (p, t), v in threads.items() if p == 0}
    assert {e["pid"] for e in events} == {0, 1}
    # compute runs on the calling thread: its ops never overlap, nor the collectives on the communication thread
    cpu_ops, kernels = _by_thread(events, "cpu_op"), _by_thread(events, "kernel")
    assert set(kernels) == {(0, tid["communication thread"]), (1, tid["communication thread"])}
    assert all(_disjoint(evs) for evs in [*cpu_ops.values(), *kernels.values()])
    assert {e["args"]["collective"] for evs in kernels.values() for e in evs} >= {"all_reduce", "all_to_all"}
    assert max(e["ts"] + e["dur"] for e in events) == pytest.approx(row["isolated_ms"] * 1000, rel=0.01)
    host = [e for evs in cpu_ops.values() for e in evs]
    assert all("traced_us" in e["args"] and not math.isnan(e["args"]["traced_us"]) for e in host)
    # the calling thread waits for the all_to_all whose output it reads (intra-rank sync), or a collective waits
    # for its peer: the waits are events
    assert any(e["cat"] == "wait" for e in events)
