"""Peaks stored with the platform, and the op_coverage named query over a small sweep."""
from __future__ import annotations

import pandas as pd
import torch

from collectors.ops.peaks import measure_peaks, store_peaks
from collectors.ops.sweep import Sweep, SweepOptions
from collectors.ops.timer import TimerSettings
from pmdb import platform as platforms
from pmdb.cli.core import named_queries

FAST = TimerSettings(warmup=1, min_reps=2, max_reps=3, min_time_us=0, cold_min_reps=2, cold_max_reps=2,
                     flush_bytes=4 * 2 ** 20)


def test_peaks_are_measured_and_stored(store):
    name = platforms.register_local(store)["name"]
    rows = measure_peaks(torch.device("cpu"), gemm_n=128, stream_bytes=4 * 2 ** 20,
                         settings=TimerSettings(warmup=1, min_reps=3, max_reps=3, min_time_us=0))
    assert {r["metric"] for r in rows} == {"gemm_flops", "mem_bw"}
    with store.run("peaks", name, {}) as run:
        store_peaks(store, run.run_id, name, rows)
    peaks = store.query("SELECT metric, value FROM v_platform_peaks WHERE platform = ?", [name])
    values = dict(zip(peaks.metric, peaks.value))
    assert 1e8 < values["gemm_flops"] < 1e13  # FLOP/s of a CPU
    assert 1e8 < values["mem_bw"] < 1e12      # bytes/s
    detail = next(r["details"] for r in rows if r["metric"] == "gemm_flops")
    assert detail["median_rate"] <= values["gemm_flops"] * (1 + 1e-9)  # the peak is the best repetition


def test_op_coverage_query(store):
    name = platforms.register_local(store)["name"]
    options = SweepOptions(ops=["transpose"], cache="both", settings=FAST, memory_cap=200_000,
                           configs=[{"B": 2, "M": 8, "N": 8}, {"B": 2, "M": 16, "N": 4}, {"B": 64, "M": 64, "N": 64}])
    with store.run("ops", name, {}) as run:
        Sweep(store, run, name, options).execute(progress=False)
    frame = store.query(named_queries()["op_coverage"][1])
    assert isinstance(frame, pd.DataFrame) and len(frame) == 4  # fwd/bwd x warm/cold
    assert set(frame.op) == {"transpose"} and (frame.rows == 2).all() and (frame.configs == 2).all()
    assert (frame.skipped == 1).all() and (frame.cv_median >= 0).all() and (frame.threads == 1).all()
