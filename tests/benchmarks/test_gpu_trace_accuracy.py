"""benchmarks/gpu_trace_accuracy.py: the per-shape table of cross-GPU prices against traced device times, on known
numbers (totals per iteration, the GEMM and small-kernel sums, the rows shown)."""
from tests.harness import load_benchmark


def _row(op: str, calls: float, traced: float, cross: float) -> dict:
    return {"op": op, "pass": "fwd", "shape": "M=8 N=8", "calls": calls, "traced_us": traced, "cross_us": cross}


def test_per_shape_lines_sum_per_iteration_and_cut_the_table():
    bench = load_benchmark("gpu_trace_accuracy")
    rows = [_row("fully_connected", 36, 300.0, 240.0), _row("bmm", 36, 100.0, 190.0), _row("add", 72, 4.0, 13.0)]
    text = "\n".join(bench._per_shape_lines(rows, shown=2))
    # per iteration: traced 36*300 + 36*100 + 72*4 = 14688 µs, priced 36*240 + 36*190 + 72*13 = 16416 µs
    assert "3 shapes of ops with a cross-GPU version, 14.7 ms" in text and "priced at 16.4 ms (x1.12)" in text
    assert "traced 14.4 ms, priced 15.5 ms" in text          # the two GEMMs
    assert "Kernels under 10 µs (1 shapes): traced 0.29 ms, priced 0.94 ms" in text
    assert "| fully_connected | fwd | M=8 N=8 | 36 | 300.0 | 240.0 | 0.80 |" in text
    assert "| bmm | fwd | M=8 N=8 | 36 | 100.0 | 190.0 | 1.90 |" in text
    assert "| add |" not in text and "1 more shapes" in text
    assert "no mined shape" in bench._per_shape_lines([])[1]
