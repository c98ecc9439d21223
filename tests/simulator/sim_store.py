"""Storing the simulator tests' recordings (a module with a unique name: test files import it directly, which a
module named ``conftest`` cannot guarantee when several test folders run together)."""
from __future__ import annotations

from pathlib import Path

from collectors.traces.ingest import RankTraces, ingest_trace_set
from pmdb.store import Store


def ingest(store: Store, platform: str, ranks: list[RankTraces], label: str, source: str,
           workload_id: int | None = None) -> int:
    """Store ``ranks`` as one trace set under a trace run of its own; returns the trace set id."""
    with store.run("trace", platform, {"label": label}) as run:
        return ingest_trace_set(store, run.run_id, platform, ranks, label=label, source=source,
                                workload_id=workload_id)


def cpu_ranks(directory: Path) -> list[RankTraces]:
    """Both ranks' Kineto and ET files of the 2-rank CPU recording."""
    return [RankTraces(r, directory / f"kineto_{r}.json", directory / f"et_{r}.json") for r in (0, 1)]


def warm_and_cold_linear(store: Store, platform: str) -> None:
    """The platform's overhead table fitted from its traces, and a cold and a warm roofline model of the forward
    linear registered as champions (cold 10x slower): what reuse pricing needs to place ops between two states."""
    from fitters.overheads import fit_overheads
    from fitters.registry import Registry, VersionRecord
    from fitters.roofline import uncalibrated

    with store.run("overheads", platform, {}) as run:
        fit_overheads(store, run.run_id, platform)
    registry = Registry(store.workspace)
    for state, peaks in (("cold", {"gemm_flops": 5e9, "mem_bw": 1e9}), ("warm", {"gemm_flops": 50e9, "mem_bw": 10e9})):
        record = VersionRecord(name=f"fully_connected.fwd.{state}~{platform}", platform=platform,
                               op="fully_connected", family="roofline", pass_="fwd", implementation="torch",
                               dtype="float32", cache_state=state, metrics={"gmae": 0.2, "mape": 0.25, "std": 0.1})
        version = registry.log_version(store, None, record, uncalibrated("fully_connected", "fwd", "float32", peaks),
                                       [], {})
        registry.set_champion(store, record.name, version)


def probed_run(store: Store, kind: str, platform: str, probes: list[dict], *, fail: bool = False,
               key: str = "memory_probe") -> str:
    """A run of ``kind`` whose summary holds these probes under ``key`` (as the stages store them: memory probes,
    or ``wake_probe``); ``fail``: it fails, so it ends 'failed'. Its run id."""
    try:
        with store.run(kind, platform, {}) as run:
            run.summary = {key: probes}
            if fail:
                raise RuntimeError("the run fails")
    except RuntimeError:
        pass
    return run.run_id


def probed_truth(store: Store, platform: str, name: str, summary: dict) -> str:
    """A measured workload run of a one-rank workload ``name`` (truth 1000 µs) whose summary is ``summary`` (its
    probes, as collect workload stores them); its run id."""
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "other", "name": name, "config": {}, "config_hash": name,
                                             "batch_size": 8, "world_size": 1}, returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 5, "warmup": 1, "measured_us": 1000.0})
        run.summary = summary
    return run.run_id


def telling_probes(count: int, tries: int = 8) -> list[dict]:
    """``count`` real memory probes with the LLC curve whose curve tells an LLC from memory, as predict counts them;
    the test is skipped when ``tries`` probes give fewer (on a host whose LLC serves a process little, the 48 MiB-L3
    Intel guest, a 16 MiB read may run at memory's pace, and such a probe tells nothing)."""
    import pytest

    from collectors.memory_probe import read_probe
    from simulator.llc_found import probe_found

    probes: list[dict] = []
    for _ in range(tries):
        probe = read_probe(curve=True)
        probes += [probe] if probe_found(probe.get("llc")) is not None else []
        if len(probes) == count:
            return probes
    pytest.skip(f"{len(probes)} of {tries} memory probes on this host told its LLC from memory (a 16 MiB read as "
                f"slow as a flushed one): no LLC found to price by")


def two_rank_truth(store: Store, platform: str, directory: Path, config_hash: str, probes: list[dict],
                   wakes: list[dict] | None = None) -> str:
    """The 2-rank CPU recording in ``directory`` stored as a measured workload run (truth 12345 µs, these memory
    probes and ``wakes`` compute probes in its summary) and its trace set; the workload run's id."""
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "other", "name": "two_rank_step", "config": {},
                                             "config_hash": config_hash, "batch_size": 64, "world_size": 2},
                               returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 10, "warmup": 2, "measured_us": 12345.0})
        run.summary = {"memory_probe": probes, **({"wake_probe": wakes} if wakes else {})}
    ingest(store, platform, cpu_ranks(directory), "two_rank_step", "captured", workload_id=wid)
    return run.run_id
