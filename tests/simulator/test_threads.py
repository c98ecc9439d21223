"""A model-mode prediction of a workload run made with kernel models fitted at another thread count says so in one
warning line (stderr and Prediction.warnings); matching thread counts and replay mode stay silent."""
from __future__ import annotations

import shutil

import pytest

from fitters.registry import Registry, VersionRecord
from fitters.roofline import uncalibrated
from pmdb import platform as platforms
from simulator.predict import predict_trace_set
from simulator.threads import model_threads, thread_mismatch

pytestmark = pytest.mark.slow  # uses the 2-rank recording

PEAKS = {"gemm_flops": 5e10, "mem_bw": 1e10}


def _measured_with(store, platform: str, threads: int) -> str:
    """An ops run holding fully_connected forward timings taken with ``threads`` intra-op threads."""
    with store.run("ops", platform, {}) as run:
        store.insert("op_measurements", [
            {"run_id": run.run_id, "platform": platform, "op": "fully_connected", "pass": "fwd",
             "implementation": "torch", "dtype": "float32", "device": "cpu", "cache_state": "cold",
             "params": {"B": 1, "M": m, "N": 64, "K": 64}, "config_key": f"k{m}", "median_us": 10.0 + m,
             "mean_us": 10.0 + m, "repetitions": 5, "warmup": 1, "threads": threads} for m in (16, 32)])
    return run.run_id


def _setup(store, cpu_trace_files, mlflow_template, model_threads_: int, run_threads_: int) -> tuple[int, str, str]:
    from sim_store import cpu_ranks, ingest

    platform = platforms.resolve(store, None)
    ops_run = _measured_with(store, platform, model_threads_)
    with store.run("workload", platform, {}) as run:
        wid = store.insert_one("workloads", {"family": "other", "name": "two_rank_step", "config": {},
                                             "config_hash": "two-rank-threads", "batch_size": 64, "world_size": 2},
                               returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": platform,
                                           "iterations": 10, "warmup": 2, "threads": run_threads_,
                                           "measured_us": 12345.0})
    ts = ingest(store, platform, cpu_ranks(cpu_trace_files), "two_rank_step", "captured", workload_id=wid)
    shutil.copy(mlflow_template.mlflow_db, store.workspace.mlflow_db)   # an empty MLflow store, made once per run
    registry = Registry(store.workspace)
    name = f"pmdb.{platform}.fully_connected.fwd.cold"
    record = VersionRecord(name=name, platform=platform, op="fully_connected", family="roofline", pass_="fwd",
                           implementation="torch", dtype="float32", cache_state="cold", data_runs=[ops_run],
                           metrics={"gmae": 0.2, "mape": 0.25, "std": 0.1})
    version = registry.log_version(store, None, record, uncalibrated("fully_connected", "fwd", "float32", PEAKS),
                                   [], {})
    registry.set_champion(store, name, version)
    return ts, run.run_id, f"{name}:{version}"


def test_models_of_another_thread_count_warn_once(store, cpu_trace_files, mlflow_template, capsys):
    ts, truth, model = _setup(store, cpu_trace_files, mlflow_template, model_threads_=4, run_threads_=1)
    name, version = model.rsplit(":", 1)
    assert model_threads(store, [(name, int(version))]) == {4: [model]}
    capsys.readouterr()
    pred = predict_trace_set(store, ts, mode="model", workload_run_id=truth)
    assert pred.workload_run_id == truth and [m.name for m in pred.models] == [name]
    threads = [w for w in pred.warnings if "intra-op thread" in w]
    assert len(threads) == 1
    assert "1 intra-op thread per rank" in threads[0] and "1 fitted at 4 threads" in threads[0]
    assert model in threads[0]
    # one model for one op: most of the work keeps its traced time, which is said too (replay, not a model)
    assert [w for w in pred.warnings if w not in threads] == [w for w in pred.warnings if "traced time" in w]
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pmdb: warning:")]
    assert f"pmdb: warning: {threads[0]}" in err and len(err) == len(pred.warnings)
    # replay mode takes no model: nothing to warn about
    assert predict_trace_set(store, ts, mode="replay").warnings == []
    # the same run recorded with 4 threads agrees with the models
    store.conn.execute("UPDATE workload_runs SET threads = 4 WHERE run_id = ?", [truth])
    assert thread_mismatch(store, truth, [(name, int(version))]) is None
    again = predict_trace_set(store, ts, mode="model", workload_run_id=truth).warnings
    assert not [w for w in again if "intra-op thread" in w]
    # unknown thread count of the run: no claim either way
    store.conn.execute("UPDATE workload_runs SET threads = NULL WHERE run_id = ?", [truth])
    assert thread_mismatch(store, truth, [(name, int(version))]) is None


def test_comm_shares_core_when_the_ranks_leave_no_core_to_spare(store):
    from simulator.threads import comm_shares_core

    cpu = platforms.ensure_named(store, "cpu-test-box", device_kind="cpu")
    gpu = platforms.ensure_named(store, "gpu-test-box", device_kind="cuda")
    store.conn.execute("UPDATE platforms SET cpu_cores = 4 WHERE name IN (?, ?)", [cpu, gpu])
    assert store.scalar("SELECT semantics FROM platforms WHERE name = ?", [cpu]) == "sync_host"
    # 4 cores: 2 ranks x (1 thread + 1 communication thread) fit, 2 x (2 + 1) or 4 x (1 + 1) do not
    cpu, gpu = platforms.load(store, cpu), platforms.load(store, gpu)
    assert not comm_shares_core(cpu, 2, 1) and not comm_shares_core(cpu, 2, None)
    assert comm_shares_core(cpu, 2, 2) and comm_shares_core(cpu, 4, 1)
    assert not comm_shares_core(cpu, 1, 8)        # one rank: no collectives to share with
    assert not comm_shares_core(gpu, 8, 1)        # device streams, not host threads
    assert not comm_shares_core(platforms.find(store, "nowhere"), 2, 1)


def test_prediction_records_shared_cores(store, cpu_trace_files, mlflow_template):
    ts, truth, _ = _setup(store, cpu_trace_files, mlflow_template, model_threads_=1, run_threads_=1)
    platform = platforms.resolve(store, None)
    results = {}
    for cores in (2, 64):
        store.conn.execute("UPDATE platforms SET cpu_cores = ? WHERE name = ?", [cores, platform])
        results[cores] = predict_trace_set(store, ts, mode="model", workload_run_id=truth)
    assert results[2].model_selection.comm_shares_core and results[2].model_selection.label().endswith(
        "/comm-shares-core")
    assert results[64].model_selection == results[2].model_selection.sharing_core(False)
    # the collectives' work can no longer overlap the ranks' compute (here every collective's output is consumed
    # at once, so nothing overlapped: never faster; the engine tests show the lost overlap)
    assert results[2].predicted_us >= results[64].predicted_us > 0
