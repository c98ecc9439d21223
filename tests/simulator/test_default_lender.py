"""A GPU target without an overhead table of its own borrows today's host path: the newest table of the shipped
sample's platform (nvidia-h200), stored from pmdb/samples/host_path once where the store has none; the prediction
names it, --overheads-from and the target's own table win, a CPU target borrows nothing. Real shared GPU trace
(param_linear), real store, the real shipped sample."""
from __future__ import annotations

import json

import pytest

from fitters.overheads import fit_overheads, read_sample, store_sample
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.samples import host_path
from simulator.model_set import default_lender
from simulator.predict import predict_trace_set


def _versions(store, platform: str) -> list[int]:
    frame = store.query("SELECT overhead_version FROM v_overhead_versions WHERE platform = ? ORDER BY 1", [platform])
    return frame["overhead_version"].astype(int).tolist()


def test_the_sample_is_stored_once_and_named(store, gpu_trace):
    trace_set = gpu_trace("param_linear", "gpu-target")
    first = predict_trace_set(store, trace_set, mode="model")
    stored = _versions(store, host_path.PLATFORM)
    assert first.overhead_version == stored[0] and len(stored) == 1
    note = next(n for n in first.defaults if "host overheads" in n)
    assert note == (f"host overheads (T1-T5) from platform {host_path.PLATFORM}'s overhead version {stored[0]}, not "
                    f"gpu-target's own (the default lender of a GPU without a table; --overheads-from picks another)")
    params = json.loads(store.scalar("SELECT CAST(params AS VARCHAR) FROM overhead_versions "
                                     "WHERE overhead_version = ?", [stored[0]]))
    assert params["sample"] == host_path.TABLE.name and params["source"]["device"] == "NVIDIA H200"
    rows = store.scalar("SELECT count(*) FROM overheads WHERE overhead_version = ?", [stored[0]])
    assert rows == len(read_sample(host_path.TABLE)["overheads"])
    assert store.scalar("SELECT gpu_name FROM platforms WHERE name = ?", [host_path.PLATFORM]) == "NVIDIA H200"
    again = predict_trace_set(store, trace_set, mode="model")
    assert _versions(store, host_path.PLATFORM) == stored and again.predicted_us == pytest.approx(first.predicted_us)


def test_the_newest_table_of_the_lender_and_the_targets_own_win(store, gpu_trace):
    trace_set = gpu_trace("param_linear", "gpu-target")
    store_sample(store, host_path.TABLE)
    newer = store_sample(store, host_path.TABLE)   # e.g. a table the user fitted from their own H200 trace
    assert predict_trace_set(store, trace_set, mode="model").overhead_version == newer
    with store.run("overheads", "gpu-target", {}) as run:
        own = fit_overheads(store, run.run_id, "gpu-target")["overhead_version"]
    pred = predict_trace_set(store, trace_set, mode="model")
    assert pred.overhead_version == own and not any("host overheads" in n for n in pred.defaults)


def test_a_cpu_target_borrows_nothing_and_a_bad_sample_is_one_line(store, tmp_path):
    platforms.ensure_named(store, "cpu-target", device_kind="cpu")
    assert default_lender(store, "cpu-target", Semantics.SYNC_HOST) is None
    assert _versions(store, host_path.PLATFORM) == []
    bad = tmp_path / "table.json"
    bad.write_text('{"platform": "x"}')
    with pytest.raises(PmdbError, match="not a pmdb overhead sample"):
        store_sample(store, bad)
