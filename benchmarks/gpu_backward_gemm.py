"""How a GPU linear / bmm backward's GEMMs compare with its forward GEMM, measured in real Kineto traces (issue #33).

pmdb prices a backward GEMM op (fully_connected, bmm) as two forward GEMMs of the same sizes
(``fitters/gemm_shapes.py``): backward = 2 x forward. On the GPU the backward runs other cuBLAS kernels (other
operand layouts, split-K for the weight gradient's long reduction), so this script measures, per traced call,

    ratio = (device time of the backward node's GEMM kernels) / (2 x device time of its forward GEMM kernels)

Pairing is exact, per call: an autograd node (``autograd::engine::evaluate_function: AddmmBackward0`` / ``MmBackward0``
/ ``BmmBackward0`` / ``BaddbmmBackward0`` / ``LinearBackward0``) carries the ``Sequence number`` of the forward op
that created it (``aten::addmm`` / ``mm`` / ``bmm`` / ``baddbmm``). A kernel belongs to the innermost CPU op around
its launch (Kineto ``correlation``); GEMM kernels are those whose name says so (cuBLAS / CUTLASS / xmma gemm, gemv,
split-K reduction); the bias gradient's reduction, memsets and copies are left out of both sides. A node that ran ONE
GEMM (an input that needs no gradient: the first layer's dX) is counted apart, not in the ratio. Shapes (M, N, K,
batch B) come from the forward op's Kineto ``Input Dims`` where recorded (size: FLOPs = 2·B·M·N·K; "small" below
1 GFLOP). Nothing here reads a label file; nothing is fitted.

    .venv/bin/python benchmarks/gpu_backward_gemm.py [--shared ../shared/data] [--out FILE]
"""

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import pandas as pd  # noqa: E402

from collectors.traces.et import parse_et  # noqa: E402
from collectors.traces.files import read_trace_file  # noqa: E402
from collectors.traces.kineto import parse_kineto  # noqa: E402
from pmdb_commands import host_line  # noqa: E402
OUT = ROOT / "benchmarks" / "results" / "gpu_backward_gemm.md"
TRACES = {   # folder -> Kineto files (all ranks given are read)
    "h200_gpt2_large": ["kineto.json.gz"],
    "hta_a100_16rank_rank0": ["kineto.json.gz"],
    "hta_128rank_sampled": ["rank0.kineto.json.gz", "rank1.kineto.json.gz"],
    "param_linear": ["kineto.json.gz"],
    "param_resnet": ["kineto.json.gz"],
    "hta_alexnet": ["kineto.json.gz"],
}
FORWARD_OPS = {"aten::addmm": "linear", "aten::mm": "linear", "aten::bmm": "bmm", "aten::baddbmm": "bmm"}
BACKWARD_PREFIX = "autograd::engine::evaluate_function: "
BACKWARD_NODES = {"AddmmBackward0": "linear", "MmBackward0": "linear", "LinearBackward0": "linear",
                  "BmmBackward0": "bmm", "BaddbmmBackward0": "bmm"}
GEMM_KERNEL = re.compile(r"gemm|gemv|splitk|xmma|s1688|cutlass", re.IGNORECASE)
NOT_GEMM = re.compile(r"reduce_kernel|elementwise|memset|memcpy", re.IGNORECASE)
LAYOUT = re.compile(r"_(nn|nt|tn|tt)(?:_|$)")
SMALL_FLOPS = 1e9
CONSISTENT = 0.10   # one factor fits when every trace's median ratio lies within 10 % of their common median
MIN_CALLS = 5       # a trace's median counts in the verdict from this many paired calls
MIN_TRACES = 3      # and a verdict of "consistent" needs this many such traces


@dataclass
class Call:
    """One forward GEMM op and its backward node (µs: summed GEMM kernel device time)."""

    trace: str
    kind: str                  # linear | bmm
    fwd_us: float
    bwd_us: float
    bwd_gemms: int             # GEMM ops the backward node ran (2: dX and dW)
    flops: float | None        # 2·B·M·N·K of the forward, None without Input Dims
    fwd_layouts: str
    bwd_layouts: str
    dx_us: float | None = None  # the input-gradient GEMM (reduces the forward's N), None when not told apart
    dw_us: float | None = None  # the weight-gradient GEMM (reduces the forward's M rows: tokens)
    by_layout: dict[str, float] = field(default_factory=dict)   # backward GEMM kernel µs per cuBLAS layout
    fwd_kernels: tuple[str, ...] = ()                           # the forward's GEMM kernel names


def _gemm_kernel(name: str) -> bool:
    return bool(GEMM_KERNEL.search(name)) and not NOT_GEMM.search(name)


def math_of(names: list[str]) -> str:
    """'tf32' when a GEMM kernel runs on tensor cores in TF32 (CUTLASS ``tensorop_s1688`` / ``tf32`` in its name),
    else 'fp32' (SIMT FFMA: ``sgemm``, ``ffma``)."""
    return "tf32" if any(re.search(r"tensorop_s1688|tf32|s1688gemm", n, re.IGNORECASE) for n in names) else "fp32"


def _layouts(names: list[str]) -> str:
    found = [m.group(1) for m in (LAYOUT.search(n) for n in names) if m]
    return "+".join(found) if found else "?"


def _by_layout(kernels: list[tuple[str, float]]) -> dict[str, float]:
    """Kernel µs per cuBLAS/CUTLASS operand layout named in the kernel ('?' when the name gives none; a split-K
    reduction kernel counts with the GEMM before it)."""
    out: dict[str, float] = {}
    last = "?"
    for name, us in kernels:
        found = LAYOUT.search(name)
        layout = found.group(1) if found else (last if "splitk" in name.lower() else "?")
        out[layout] = out.get(layout, 0.0) + us
        last = layout
    return out


def _shape(name: str, dims: list | None) -> float | None:
    """FLOPs of a forward GEMM op from its Input Dims."""
    if not isinstance(dims, list):
        return None
    tensors = [d for d in dims if isinstance(d, list) and d]
    try:
        if name in ("aten::addmm", "aten::baddbmm"):
            tensors = tensors[-2:]
        a, b = tensors[-2], tensors[-1]
        if len(a) == 2 and len(b) == 2:
            return 2.0 * a[0] * a[1] * b[1]
        if len(a) == 3 and len(b) == 3:
            return 2.0 * a[0] * a[1] * a[2] * b[2]
    except (IndexError, TypeError):
        return None
    return None


def _dims(name: str, dims: list | None) -> tuple[int, int, int] | None:
    """(M, N, K) of a GEMM op from its Input Dims (batch left out): out[M, N] = a[M, K] @ b[K, N]."""
    if not isinstance(dims, list):
        return None
    tensors = [d for d in dims if isinstance(d, list) and d]
    if name in ("aten::addmm", "aten::baddbmm"):
        tensors = tensors[-2:]
    if len(tensors) < 2 or len(tensors[-2]) < 2 or len(tensors[-1]) < 2:
        return None
    a, b = tensors[-2], tensors[-1]
    return int(a[-2]), int(b[-1]), int(a[-1])


def _split(fwd: tuple[int, int, int] | None, children: list[tuple[tuple[int, int, int] | None, float]]
           ) -> tuple[float | None, float | None]:
    """(dX µs, dW µs) of a two-GEMM backward: dX reduces the forward's N, dW its M (None when M == N or unknown)."""
    if fwd is None or len(children) != 2 or fwd[0] == fwd[1] or any(d is None for d, _ in children):
        return None, None
    by_reduced = {d[2]: us for d, us in children}
    if set(by_reduced) != {fwd[0], fwd[1]}:
        return None, None
    return by_reduced[fwd[1]], by_reduced[fwd[0]]


def et_shapes(path: Path) -> dict[str, list]:
    """Per forward GEMM op name, its input shapes from an execution trace (pmdb's ET parser,
    :func:`collectors.traces.et.parse_et`) where every node of that name in it has the same shapes (a trace whose
    Kineto file has no Input Dims: one iteration's ET sizes every call of that op); names with several shapes are
    left out."""
    if not path.is_file():
        return {}
    nodes = parse_et(read_trace_file(path).doc, str(path)).nodes
    found: dict[str, set[str]] = {}
    for name, shapes in zip(nodes["name"], nodes["input_shapes"]):
        if name in FORWARD_OPS:
            found.setdefault(name, set()).add(json.dumps(shapes))
    return {name: json.loads(next(iter(shapes))) for name, shapes in found.items() if len(shapes) == 1}


def trace_calls(path: Path, label: str, et: dict[str, list] | None = None) -> tuple[str, list[Call]]:
    """(GPU name, paired calls) of one Kineto file, read by pmdb's Kineto parser
    (:func:`collectors.traces.kineto.parse_kineto`: CPU ops nested per thread, each device event owned by the
    innermost CPU op around its launch); ``et``: forward GEMM shapes by op name (:func:`et_shapes`) for forward ops
    that carry no Input Dims."""
    trace = parse_kineto(read_trace_file(path).doc, str(path))
    ops, kernels = trace.ops, trace.kernels
    names = " ".join(kernels["name"].astype(str))
    arch = next((a for a, marks in (("sm90", ("sm90",)), ("sm80", ("sm80", "_80_", "ampere_"))) if any(
        m in names for m in marks)), None)
    gpu = trace.gpu_names[0] if trace.gpu_names else f"GPU not named{f' ({arch} kernels)' if arch else ''}"
    name_of = dict(zip(ops["op_id"].astype(int), ops["name"].astype(str)))
    parent = {int(i): (None if pd.isna(p) else int(p)) for i, p in zip(ops["op_id"], ops["parent_id"])}
    attrs = dict(zip(ops["op_id"].astype(int), ops["attrs"]))
    dims_of = dict(zip(ops["op_id"].astype(int), ops["input_shapes"]))
    gemm_us: dict[int, float] = {}        # op id -> GEMM kernel µs launched in its subtree
    gemm_names: dict[int, list[str]] = {}
    gemm_kernels: dict[int, list[tuple[str, float]]] = {}
    gemm_ops: dict[int, set[int]] = {}    # backward node -> GEMM ops under it that launched GEMM kernels
    for kernel, owner, dur in zip(kernels["name"].astype(str), kernels["op_id"], kernels["dur_us"].astype(float)):
        if pd.isna(owner) or not _gemm_kernel(kernel):
            continue
        chain, node = [], int(owner)
        while node is not None:
            chain.append(node)
            node = parent.get(node)
        innermost_gemm = next((n for n in chain if name_of[n] in FORWARD_OPS), None)
        for node in chain:
            gemm_us[node] = gemm_us.get(node, 0.0) + dur
            gemm_names.setdefault(node, []).append(kernel)
            gemm_kernels.setdefault(node, []).append((kernel, dur))
            if name_of[node].startswith(BACKWARD_PREFIX) and innermost_gemm is not None:
                gemm_ops.setdefault(node, set()).add(innermost_gemm)

    def in_backward(i: int) -> bool:
        node = parent.get(i)
        while node is not None:
            if name_of[node].startswith(BACKWARD_PREFIX):
                return True
            node = parent.get(node)
        return False

    def sequence(i: int):
        found = attrs[i].get("sequence") if isinstance(attrs[i], dict) else None
        return None if found is None else int(found)

    def dims(i: int) -> list | None:
        value = dims_of[i]
        return value if isinstance(value, list) and value else None

    forward: dict[int, int] = {}   # sequence number -> forward GEMM op (unique ones only)
    dropped: set[int] = set()
    for i in sorted(name_of):
        seq = sequence(i)
        if name_of[i] in FORWARD_OPS and seq is not None and i in gemm_us and not in_backward(i):
            if seq in forward:
                dropped.add(seq)
            forward[seq] = i
    calls = []
    for i in sorted(name_of):
        name = name_of[i]
        if not name.startswith(BACKWARD_PREFIX) or name[len(BACKWARD_PREFIX):] not in BACKWARD_NODES:
            continue
        seq = sequence(i)
        fwd = forward.get(seq)
        if fwd is None or seq in dropped or i not in gemm_us:
            continue
        kind = BACKWARD_NODES[name[len(BACKWARD_PREFIX):]]
        fwd_dims = dims(fwd) or (et or {}).get(name_of[fwd])
        children = [(_dims(name_of[c], dims(c)), gemm_us[c]) for c in sorted(gemm_ops.get(i, ()))]
        dx, dw = _split(_dims(name_of[fwd], fwd_dims), children)
        calls.append(Call(label, kind, gemm_us[fwd], gemm_us[i], len(children), _shape(name_of[fwd], fwd_dims),
                          _layouts(gemm_names[fwd]), _layouts(gemm_names[i]), dx, dw, _by_layout(gemm_kernels[i]),
                          tuple(gemm_names[fwd])))
    return gpu, calls


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def _layout_ratio(group: list[Call], layout: str) -> float:
    """Median over the calls that ran ``layout`` of its backward kernel µs / the forward's GEMM µs."""
    return statistics.median(c.by_layout[layout] / c.fwd_us for c in group if layout in c.by_layout and c.fwd_us > 0)


def table(rows: list[tuple[str, str, list[Call]]]) -> list[str]:
    """Markdown rows: trace, GPU, kind, size, calls, ratio quartiles, time-weighted ratio, layouts."""
    out = ["| trace | GPU | math | op | size | calls | ratio q1 / median / q3 | sum bwd / 2 sum fwd | dX / fwd "
           "| dW / fwd | bwd layout / fwd | fwd -> bwd kernels |",
           "|---|---|---|---|---|---:|---|---:|---:|---:|---|---|"]
    for label, gpu, calls in rows:
        paired = [c for c in calls if c.bwd_gemms >= 2]
        for kind in ("linear", "bmm"):
            mine = [c for c in paired if c.kind == kind]
            bins = {c.flops < SMALL_FLOPS for c in mine if c.flops is not None}
            sized = all(c.flops is not None for c in mine)
            groups = {("< 1 GFLOP" if True in bins else ">= 1 GFLOP") if sized and len(bins) == 1 else "all": mine}
            if len(bins) > 1:
                groups["< 1 GFLOP"] = [c for c in mine if c.flops is not None and c.flops < SMALL_FLOPS]
                groups[">= 1 GFLOP"] = [c for c in mine if c.flops is not None and c.flops >= SMALL_FLOPS]
            for size, group in groups.items():
                if not group:
                    continue
                ratios = sorted(c.bwd_us / (2 * c.fwd_us) for c in group if c.fwd_us > 0)
                q1, med, q3 = _quartiles(ratios)
                weighted = sum(c.bwd_us for c in group) / (2 * sum(c.fwd_us for c in group))
                split = [c for c in group if c.dx_us is not None and c.fwd_us > 0]
                dx = f"{statistics.median(c.dx_us / c.fwd_us for c in split):.2f}" if split else "-"
                dw = f"{statistics.median(c.dw_us / c.fwd_us for c in split):.2f}" if split else "-"
                per_layout = ", ".join(f"{k} {_layout_ratio(group, k):.2f}"
                                       for k in sorted({k for c in group for k in c.by_layout}))
                layouts = sorted({f"{c.fwd_layouts} -> {c.bwd_layouts}" for c in group})
                shown = ", ".join(layouts[:3]) + (f", +{len(layouts) - 3}" if len(layouts) > 3 else "")
                maths = "/".join(sorted({math_of([*c.fwd_kernels]) for c in group}))
                out.append(f"| {label} | {gpu} | {maths} | {kind} | {size} | {len(group)} | {q1:.2f} / {med:.2f} / "
                           f"{q3:.2f} | {weighted:.2f} | {dx} | {dw} | {per_layout} | {shown} |")
        single = [c for c in calls if c.bwd_gemms < 2]
        if single:
            out.append(f"| {label} | {gpu} | | (one-GEMM backward nodes, not in the ratio) | | {len(single)} "
                       f"| | | | | | |")
    return out


def verdict(rows: list[tuple[str, str, list[Call]]], math: str | None = None) -> list[str]:
    """Whether one backward/forward factor per op kind fits every trace: per trace the median ratio (two-GEMM
    nodes, at least MIN_CALLS; ``math``: only calls whose forward ran that math, 'fp32' or 'tf32'), their spread
    around the common median against CONSISTENT."""
    out = []
    for kind in ("linear", "bmm"):
        medians = {}
        for label, gpu, calls in rows:
            ratios = [c.bwd_us / (2 * c.fwd_us) for c in calls if c.kind == kind and c.bwd_gemms >= 2 and c.fwd_us > 0
                      and (math is None or math_of(list(c.fwd_kernels)) == math)]
            if len(ratios) >= MIN_CALLS:
                medians[f"{label} ({gpu})"] = statistics.median(ratios)
        if not medians:
            continue
        centre = statistics.median(medians.values())
        spread = max(abs(v / centre - 1) for v in medians.values())
        fits = spread < CONSISTENT and len(medians) >= MIN_TRACES
        listed = "; ".join(f"{name} {value:.2f}" for name, value in medians.items())
        out.append(f"- {kind}{f' ({math} forwards only)' if math else ''}: per-trace median ratios {listed}: "
                   f"range {min(medians.values()):.2f}-{max(medians.values()):.2f}, the farthest {spread:.0%} "
                   f"from their median {centre:.2f} -> "
                   + ("consistent: one factor fits." if fits else
                      f"too few traces to say ({len(medians)} < {MIN_TRACES})." if len(medians) < MIN_TRACES else
                      f"NOT consistent (beyond {CONSISTENT:.0%}): no single backward factor fits these GPUs and "
                      f"traces."))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (default ../shared/data beside the project)")
    parser.add_argument("--out", type=Path, default=OUT, help="the Markdown result (default: %(default)s)")
    args = parser.parse_args(argv)
    folder = args.shared / "traces" / "gpu"
    if not folder.is_dir():
        print(f"gpu_backward_gemm: no traces at {folder}", file=sys.stderr)
        return 2
    rows = []
    for name, files in TRACES.items():
        calls, gpu = [], "?"
        for file in files:
            path = folder / name / file
            if path.exists():
                gpu, found = trace_calls(path, name, et_shapes(folder / name / "et.json.gz"))
                calls += found
                print(f"{name}/{file}: {gpu}, {len(found)} paired backward nodes", flush=True)
        if calls:
            rows.append((name, gpu, calls))
    lines = [f"# GPU backward GEMMs against their forward GEMM ({Path(__file__).name})", "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; read on {host_line()} (the ratios are GPU "
             f"device times read from the traces, nothing is timed on this host); traces: "
             f"`{os.path.relpath(folder, ROOT)}/` ({', '.join(TRACES)}).", "",
             "ratio = backward node's GEMM kernels / (2 x its forward op's GEMM kernels), per traced call, paired "
             "by autograd Sequence number; bias reductions, memsets and copies left out; backward nodes that ran "
             "one GEMM (an input without gradient) counted apart. Kernel layouts from cuBLAS/CUTLASS names "
             "(`?`: not in the name); dX / dW: calls whose M and N differ (told apart by the reduced dimension); "
             "bwd layout / fwd: median of each layout's backward kernel µs over the forward's. Traces not listed had "
             "no paired call.", "", *table(rows), "", "## Verdict", "", *verdict(rows), *verdict(rows, "fp32"), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines))
    print("\n".join(lines[6:]))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
