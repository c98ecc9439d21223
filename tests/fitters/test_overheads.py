"""T1-T5 extraction on hand-made Kineto traces whose values are worked out by hand in the comments, IQR
filtering, versioned storage, and the CLI."""
import json
import re

import numpy as np
import pandas as pd
import pytest

from collectors.traces.ingest import RankTraces, ingest_trace_set
from fitters.overheads import fit_overheads, iqr_summary
from pmdb import platform
from pmdb.cli.main import main


def _x(cat, name, ts, dur, tid=1, pid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid, "args": args}


def _device(name, ts, dur, corr, cat="kernel"):
    return _x(cat, name, ts, dur, tid=7, pid=0, device=0, stream=7, correlation=corr)


# GPU trace. Top-level ops on thread 1: linear [10,60], view [70,100], copy_ [105,150], relu [151,160],
# view [400,403]; on thread 2: add [20,30].
#   T1 (2 < gap < 200): view 70-60 = 10, copy_ 105-100 = 5 (relu's gap 1 and the last view's gap 240 are out)
#   T2: linear 15-10 = 5, copy_ 110-105 = 5, relu 152-151 = 1
#   T3: linear 60-34 = 26, copy_ 150-125 = 25, relu 160-155 = 5
#   T4: cudaLaunchKernel 5, 4, 3; cudaMemcpyAsync 15 (cudaStreamIsCapturing has no device work: no launch)
#   T5: linear 30-20 = 10 (between its launches); no launch: view 30 and 3, add 10
GPU_EVENTS = [
    _x("user_annotation", "ProfilerStep#1", 0, 300),
    _x("cpu_op", "aten::linear", 10, 50),
    _x("cuda_runtime", "cudaLaunchKernel", 15, 5, correlation=1),
    _x("cuda_runtime", "cudaLaunchKernel", 30, 4, correlation=2),
    _x("cuda_runtime", "cudaStreamIsCapturing", 40, 1, correlation=9),
    _x("cpu_op", "aten::view", 70, 30),
    _x("cpu_op", "aten::copy_", 105, 45),
    _x("cpu_op", "aten::empty", 106, 2),
    _x("cuda_runtime", "cudaMemcpyAsync", 110, 15, correlation=3),
    _x("cpu_op", "aten::relu", 151, 9),
    _x("cuda_runtime", "cudaLaunchKernel", 152, 3, correlation=4),
    _x("cpu_op", "aten::view", 400, 3),
    _x("cpu_op", "aten::add", 20, 10, tid=2),
    _device("gemm", 25, 15, 1), _device("gemm", 40, 10, 2), _device("Memcpy HtoD", 115, 15, 3, "gpu_memcpy"),
    _device("relu_kernel", 156, 2, 4),
]
GPU_EXPECTED = {
    ("aten::view", "T1"): [10], ("aten::copy_", "T1"): [5],
    ("aten::linear", "T2"): [5], ("aten::copy_", "T2"): [5], ("aten::relu", "T2"): [1],
    ("aten::linear", "T3"): [26], ("aten::copy_", "T3"): [25], ("aten::relu", "T3"): [5],
    ("cudaLaunchKernel", "T4"): [5, 4, 3], ("cudaMemcpyAsync", "T4"): [15],
    ("aten::linear", "T5"): [10], ("aten::view", "T5"): [30, 3], ("aten::add", "T5"): [10],
}

# CPU trace (one thread): linear [10,60] with children t [12,20] (> transpose [13,18] > as_strided [14,16]) and
# addmm [25,55] (> expand [26,28]); relu [64,80] with child clamp_min [66,78]; view [83,86]; add_ [87,88]; mul_ [88,89].
#   T1 (0 <= gap < 200 on CPUs): relu 64-60 = 4, view 83-80 = 3, add_ 87-86 = 1, mul_ 88-88 = 0 (the GPU window's
#   2 µs floor would drop the last two)
#   T2: linear 12-10 = 2, t 13-12 = 1, transpose 14-13 = 1, addmm 26-25 = 1, relu 66-64 = 2
#   T3: linear 60-55 = 5, t 20-18 = 2, transpose 18-16 = 2, addmm 55-28 = 27, relu 80-78 = 2
#   T5: linear 25-20 = 5 (between t and addmm); no child op: as_strided 2, expand 2, clamp_min 12, view 3, add_ 1,
#   mul_ 1
CPU_EVENTS = [
    _x("user_annotation", "ProfilerStep#1", 0, 500),
    _x("cpu_op", "aten::linear", 10, 50), _x("cpu_op", "aten::t", 12, 8), _x("cpu_op", "aten::transpose", 13, 5),
    _x("cpu_op", "aten::as_strided", 14, 2), _x("cpu_op", "aten::addmm", 25, 30), _x("cpu_op", "aten::expand", 26, 2),
    _x("cpu_op", "aten::relu", 64, 16), _x("cpu_op", "aten::clamp_min", 66, 12),
    _x("cpu_op", "aten::view", 83, 3), _x("cpu_op", "aten::add_", 87, 1), _x("cpu_op", "aten::mul_", 88, 1),
]
CPU_EXPECTED = {
    ("aten::relu", "T1"): [4], ("aten::view", "T1"): [3], ("aten::add_", "T1"): [1], ("aten::mul_", "T1"): [0],
    ("aten::add_", "T5"): [1], ("aten::mul_", "T5"): [1],
    ("aten::linear", "T2"): [2], ("aten::t", "T2"): [1], ("aten::transpose", "T2"): [1], ("aten::addmm", "T2"): [1],
    ("aten::relu", "T2"): [2],
    ("aten::linear", "T3"): [5], ("aten::t", "T3"): [2], ("aten::transpose", "T3"): [2], ("aten::addmm", "T3"): [27],
    ("aten::relu", "T3"): [2],
    ("aten::linear", "T5"): [5], ("aten::as_strided", "T5"): [2], ("aten::expand", "T5"): [2],
    ("aten::clamp_min", "T5"): [12], ("aten::view", "T5"): [3],
}


# CPU trace with an optimizer range (one thread): linear [10,50]; Optimizer.step#SGD.step [150,500] holding add_
# [400,410] and add_ [415,420]; relu [560,570]; Optimizer.zero_grad#SGD.zero_grad [600,650] holding no op.
#   T1: first add_ 150-50 = 100 (up to the range's start, not 400-50 = 350, which the window would drop), second
#   add_ 415-410 = 5, relu 560-500 = 60 (from the range's end, not 560-420 = 140)
#   the range: T2 400-150 = 250, T3 500-420 = 80 (its T5 between children is the second add_'s T1; a range without
#   ops, zero_grad, gives no sample: nothing places it)
#   T5 (no child op): linear 40, add_ 10 and 5, relu 10
RANGE_EVENTS = [
    _x("user_annotation", "ProfilerStep#1", 0, 1000),
    _x("cpu_op", "aten::linear", 10, 40),
    _x("user_annotation", "Optimizer.step#SGD.step", 150, 350),
    _x("cpu_op", "aten::add_", 400, 10), _x("cpu_op", "aten::add_", 415, 5),
    _x("cpu_op", "aten::relu", 560, 10),
    _x("user_annotation", "Optimizer.zero_grad#SGD.zero_grad", 600, 50),
]
RANGE_EXPECTED = {
    ("aten::add_", "T1"): [100, 5], ("aten::relu", "T1"): [60],
    ("Optimizer.step#SGD.step", "T2"): [250], ("Optimizer.step#SGD.step", "T3"): [80],
    ("aten::linear", "T5"): [40], ("aten::add_", "T5"): [10, 5], ("aten::relu", "T5"): [10],
}


def _trace(tmp_path, name, events):
    path = tmp_path / name
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    return path


def _store_trace(store, platform_name, path, profiled_with="kineto"):
    with store.run("trace", platform_name, {}) as run:
        return ingest_trace_set(store, run.run_id, platform_name, [RankTraces(0, path, None, profiled_with)])


def _fit(store, platform_name, **kw):
    with store.run("overheads", platform_name, {}) as run:
        return fit_overheads(store, run.run_id, platform_name, **kw)


def _samples(store, version):
    frame = store.query("SELECT op_name, kind, value_us FROM overhead_samples WHERE overhead_version = ? "
                        "ORDER BY op_id", [version])
    return {key: sorted(g["value_us"].tolist(), reverse=True) for key, g in frame.groupby(["op_name", "kind"])}


@pytest.mark.parametrize("events, device_kind, expected", [(GPU_EVENTS, "cuda", GPU_EXPECTED),
                                                           (CPU_EVENTS, "cpu", CPU_EXPECTED),
                                                           (RANGE_EVENTS, "cpu", RANGE_EXPECTED)],
                         ids=["gpu", "cpu", "cpu-optimizer-range"])
def test_hand_checked_samples_and_their_statistics(store, tmp_path, events, device_kind, expected):
    name = platform.ensure_named(store, f"hand-{device_kind}", device_kind=device_kind)
    _store_trace(store, name, _trace(tmp_path, "k.json", events))
    summary = _fit(store, name)
    assert summary["semantics"] == ("async_device" if device_kind == "cuda" else "sync_host")
    got = _samples(store, summary["overhead_version"])
    assert got == {k: sorted(v, reverse=True) for k, v in expected.items()}
    stats = store.query("SELECT op_name, kind, mean_us, count FROM v_overheads WHERE overhead_version = ?",
                        [summary["overhead_version"]])
    assert len(stats) == len(expected)
    for row in stats.itertuples():
        values = expected[(row.op_name, row.kind)]
        assert (row.mean_us, row.count) == (pytest.approx(np.mean(values)), len(values))


def test_iqr_filter_drops_outliers_per_op_and_kind():
    samples = pd.DataFrame({"op_name": ["a"] * 5 + ["b"] * 5, "kind": "T5",
                            "value_us": [3, 3, 3, 3, 50, 1, 2, 3, 4, 100]})
    stats = iqr_summary(samples).set_index("op_name")
    assert (stats.at["a", "mean_us"], stats.at["a", "count"]) == (3.0, 4)   # IQR 0: only the 3s stay
    # b: Q1 = 2, Q3 = 4, kept within [-1, 7]: 1, 2, 3, 4
    assert (stats.at["b", "mean_us"], stats.at["b", "count"]) == (2.5, 4)
    assert stats.at["b", "std_us"] == pytest.approx(np.std([1, 2, 3, 4], ddof=1))


def test_joint_traces_are_left_out_unless_asked_and_versions_grow(store, tmp_path):
    name = platform.ensure_named(store, "hand-cpu", device_kind="cpu")
    _store_trace(store, name, _trace(tmp_path, "kineto.json", CPU_EVENTS))
    _store_trace(store, name, _trace(tmp_path, "joint.json", CPU_EVENTS + [_x("cpu_op", "aten::zero_", 90, 4)]),
                 profiled_with="kineto+et")
    first = _fit(store, name)
    second = _fit(store, name, include_joint=True)
    assert (first["overhead_version"], second["overhead_version"]) == (1, 2)
    assert (first["traces"], second["traces"]) == (1, 2)
    assert second["samples"] == 2 * first["samples"] + 2  # zero_: T1 (90-89 = 1) and T5 (4)
    ids = store.query("SELECT overhead_version, trace_ids FROM v_overhead_versions ORDER BY 1")["trace_ids"]
    assert [len(v) for v in ids] == [1, 2]


@pytest.mark.parametrize("args, message", [
    (["--platform", "nowhere"], r"unknown platform 'nowhere'"),
    ([], r"no Kineto traces of platform"),
])
def test_cli_refusals(workspace, capsys, args, message):
    assert main(["--home", str(workspace.home), "fit", "overheads", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.search(message, err[0])


def test_cli_prints_the_new_version(fit_workspace, tmp_path, capsys):
    assert main(["--home", str(fit_workspace.home), "collect", "trace", "--kineto",
                 str(_trace(tmp_path, "k.json", CPU_EVENTS)), "--platform", "hand-cpu"]) == 0
    assert main(["--home", str(fit_workspace.home), "fit", "overheads", "--platform", "hand-cpu"]) == 0
    out = capsys.readouterr().out
    assert "overhead version 1 of hand-cpu (sync_host): 21 samples from 1 trace(s)" in out


# CPU trace (one thread) whose op does work of its own after its last child: aten::all over [8, 4, 64, 64] (131072
# elements, size class floor(log4) = 8) at [0,320] and [1000,1320], over [8, 64] (512 elements, class 4) at
# [400,410] and [500,510]; each has one child fill_ of 2 µs starting 5 µs in (no shapes: no class).
#   T2: 5 each; T3: 320-7 = 313 twice, 410-407 = 3 twice; T5: fill_ 2 (x4, no class)
SIZED_EVENTS = [_x("user_annotation", "ProfilerStep#1", 0, 2000)]
for _start, _dims in ((0, [[8, 4, 64, 64], [], []]), (400, [[8, 64]]), (500, [[8, 64]]),
                      (1000, [[8, 4, 64, 64], [], []])):
    _dur = 320 if len(_dims) == 3 else 10
    SIZED_EVENTS += [_x("cpu_op", "aten::all", _start, _dur, **{"Input Dims": _dims}),
                     _x("cpu_op", "aten::fill_", _start + 5, 2)]


def test_a_cpu_ops_own_time_is_kept_per_input_size_class_too(store, tmp_path):
    from fitters.overheads import size_class
    from simulator.model_set import Overheads

    assert [size_class(n) for n in (None, 0, 1, 3, 4, 15, 16, 512, 131072)] == [None, None, 0, 0, 1, 1, 2, 4, 8]
    name = platform.ensure_named(store, "hand-cpu", device_kind="cpu")
    _store_trace(store, name, _trace(tmp_path, "k.json", SIZED_EVENTS))
    summary = _fit(store, name)
    version = summary["overhead_version"]
    sized = store.query("SELECT op_name, kind, size_class, mean_us, count FROM overhead_sizes "
                        "WHERE overhead_version = ? ORDER BY kind, size_class", [version])
    assert [tuple(r) for r in sized.itertuples(index=False)] == [
        ("aten::all", "T2", 4, 5.0, 2), ("aten::all", "T2", 8, 5.0, 2),
        ("aten::all", "T3", 4, 3.0, 2), ("aten::all", "T3", 8, 313.0, 2)]
    assert summary["sized"] == 4
    classes = store.query("SELECT op_name, kind, size_class FROM overhead_samples WHERE overhead_version = ? "
                          "AND kind = 'T5'", [version])
    assert classes["size_class"].isna().all() and set(classes["op_name"]) == {"aten::fill_"}   # no shapes, no class
    overheads = Overheads.latest(store, name)
    assert overheads.get("aten::all", "T3") == pytest.approx(158.0)          # the name: both sizes mixed
    assert overheads.get("aten::all", "T3", 4) == 3.0 and overheads.get("aten::all", "T3", 8) == 313.0
    assert overheads.get("aten::all", "T3", 6) == 3.0        # a class never sampled: the largest sampled below it
    assert overheads.get("aten::all", "T3", 2) == 3.0 and overheads.get("aten::all", "T3", 11) == 313.0
    assert overheads.get("aten::fill_", "T5", 4) == pytest.approx(2.0)      # no curve for the name: its mean

