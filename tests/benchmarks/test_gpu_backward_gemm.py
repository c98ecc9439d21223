"""benchmarks/gpu_backward_gemm.py: backward GEMMs paired with their forward GEMM per traced call (autograd
Sequence number), on a small hand-built Kineto trace with known kernel times and on the real H200 GPT-2 trace."""
from __future__ import annotations

import gzip
import json

from harness import load_benchmark
from pmdb.traces.gc_pause import collector_paused

import pytest


def _module():
    return load_benchmark("gpu_backward_gemm")


def _op(name: str, ts: float, dur: float, **args) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def _launch(ts: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": ts, "dur": 1,
            "args": {"correlation": correlation}}


def _kernel(name: str, dur: float, correlation: int) -> dict:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 1000 + correlation, "dur": dur,
            "args": {"correlation": correlation}}


def _tiny_trace(path) -> None:
    """x[64, 32] @ W[16, 32]^T + b (M 64, N 16, K 32): forward 100 µs (tn); backward dX 90 µs (nn), dW 70 µs (nt)
    and a bias reduction of 5 µs that is not a GEMM; a second backward node with one GEMM (no dX)."""
    m, n, k = 64, 16, 32
    back = "autograd::engine::evaluate_function: AddmmBackward0"
    events = [
        _op("aten::linear", 0, 50, **{"Sequence number": 7}), _op("aten::addmm", 1, 40, **{
            "Sequence number": 7, "Input Dims": [[n], [m, k], [k, n]]}), _launch(2, 1),
        _op("aten::addmm", 60, 40, **{"Sequence number": 8, "Input Dims": [[n], [m, n], [n, n]]}), _launch(61, 5),
        _op(back, 200, 100, **{"Sequence number": 7}),
        _op("aten::mm", 201, 10, **{"Input Dims": [[m, n], [n, k]]}), _launch(202, 2),     # dX: reduces N
        _op("aten::mm", 220, 10, **{"Input Dims": [[k, m], [m, n]]}), _launch(221, 3),     # dW: reduces M
        _op("aten::sum", 240, 10, **{"Input Dims": [[m, n]]}), _launch(241, 4),
        _op(back, 400, 50, **{"Sequence number": 8}),
        _op("aten::mm", 401, 10, **{"Input Dims": [[n, m], [m, n]]}), _launch(402, 6),
        _kernel("volta_sgemm_64x64_tn", 100, 1), _kernel("volta_sgemm_128x64_nn", 90, 2),
        _kernel("volta_sgemm_128x128_nt", 70, 3), _kernel("void at::native::reduce_kernel<128, 4>", 5, 4),
        _kernel("volta_sgemm_64x64_tn", 40, 5), _kernel("volta_sgemm_64x64_nt", 30, 6),
    ]
    with gzip.open(path, "wt") as handle:
        json.dump({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Tesla V100-PCIE-32GB"}],
                   "traceEvents": events}, handle)


def test_pairs_a_call_and_splits_its_gradients(tmp_path):
    bench = _module()
    path = tmp_path / "kineto.json.gz"
    _tiny_trace(path)
    gpu, calls = bench.trace_calls(path, "tiny")
    assert gpu == "Tesla V100-PCIE-32GB"
    first, second = sorted(calls, key=lambda c: -c.bwd_gemms)
    assert (first.kind, first.fwd_us, first.bwd_us, first.bwd_gemms) == ("linear", 100, 160, 2)   # no reduce_kernel
    assert first.bwd_us / (2 * first.fwd_us) == pytest.approx(0.8)
    assert (first.dx_us, first.dw_us) == (90, 70)
    assert first.by_layout == {"nn": 90, "nt": 70}
    assert first.flops == 2 * 64 * 16 * 32
    assert (second.fwd_us, second.bwd_us, second.bwd_gemms) == (40, 30, 1)
    lines = bench.table([("tiny", gpu, calls)])
    row = next(line for line in lines if "| fp32 | linear | < 1 GFLOP |" in line)   # 131 kFLOP
    assert "| 1 | 0.80 / 0.80 / 0.80 | 0.80 | 0.90 | 0.70 | nn 0.90, nt 0.70 | tn -> nn+nt |" in row
    assert any("one-GEMM backward nodes" in line and "| 1 |" in line for line in lines)


def test_verdict_needs_three_traces_within_ten_percent():
    bench = _module()

    def trace(name: str, ratio: float) -> tuple:
        return (name, "GPU", [bench.Call(name, "linear", 100.0, 200.0 * ratio, 2, 1e9, "tn", "nn+nt",
                                         fwd_kernels=("volta_sgemm_64x64_tn",))] * bench.MIN_CALLS)

    close = [trace("a", 1.0), trace("b", 1.05), trace("c", 0.96)]
    assert "consistent: one factor fits" in bench.verdict(close)[0]
    assert "NOT consistent" in bench.verdict([*close, trace("d", 0.6)])[0]
    assert "too few traces" in bench.verdict(close[:2])[0]
    assert bench.verdict(close, "tf32") == []   # every forward here ran FP32 SIMT


def test_h200_every_gemm_kernel_is_paired(shared_data):
    """Every GEMM of the GPT-2 step is a linear or bmm call: each autograd GEMM node pairs with its forward, and the
    paired calls' forward + backward GEMM time is the trace's whole GEMM kernel time."""
    path = shared_data / "traces" / "gpu" / "h200_gpt2_large" / "kineto.json.gz"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    bench = _module()
    gpu, calls = bench.trace_calls(path, "h200")
    with collector_paused():   # 10^5 events: 3-4x faster than with collections
        events = json.load(gzip.open(path))["traceEvents"]
    nodes = [e["name"][len(bench.BACKWARD_PREFIX):] for e in events if e.get("cat") == "cpu_op"
             and e["name"].startswith(bench.BACKWARD_PREFIX)]
    assert gpu == "NVIDIA H200"
    assert sum(c.kind == "linear" for c in calls) == sum(n in ("AddmmBackward0", "MmBackward0") for n in nodes) > 0
    assert sum(c.kind == "bmm" for c in calls) == nodes.count("BmmBackward0") > 0
    gemm_us = sum(e["dur"] for e in events if e.get("cat") == "kernel" and bench._gemm_kernel(e["name"]))
    assert sum(c.fwd_us + c.bwd_us for c in calls) == pytest.approx(gemm_us)
    assert all(c.bwd_gemms == 2 and c.flops and c.dx_us is not None for c in calls if c.kind == "linear")


def test_sizes_from_the_execution_trace_when_kineto_has_none(shared_data):
    """PARAM's linear benchmark records no Input Dims in Kineto: its one-iteration ET sizes every addmm call."""
    folder = shared_data / "traces" / "gpu" / "param_linear"
    if not (folder / "et.json.gz").is_file():
        pytest.skip(f"{folder} not present")
    bench = _module()
    et = bench.et_shapes(folder / "et.json.gz")
    bias, mat1, mat2 = et["aten::addmm"][:3]
    assert mat1[1] == mat2[0] and bias == [mat2[1]]
    _, bare = bench.trace_calls(folder / "kineto.json.gz", "param")
    _, sized = bench.trace_calls(folder / "kineto.json.gz", "param", et)
    assert bare and all(c.flops is None for c in bare)
    assert len(sized) == len(bare) and {c.flops for c in sized} == {2.0 * mat1[0] * mat1[1] * mat2[1]}
