"""CPU overheads T1-T5 per op name, extracted from a platform's stored Kineto traces, pooled over all its
workloads, IQR-filtered and stored as a new version (overhead_versions, overhead_samples, overheads). All µs.

GPU platforms (``async_device``; method.md section 6). Ops are the top-level CPU ops (cpu_op events whose
ancestors are annotations only); launches are the runtime calls whose correlation id reaches a kernel, memcpy or
memset on the device.

* T1: gap from the end of a top-level op to the start of the next top-level op on the same thread, kept when
  T1_MIN_US < gap < T1_MAX_US (longer gaps are waits, data loading or host syncs, not per-op overhead);
  attributed to the op that follows the gap.
* T2: op start -> start of its first launch.  T3: end of its last launch -> op end.
* T4: duration of each launch call, per launch API name (cudaLaunchKernel, cudaMemcpyAsync, ...).
* T5: gap between consecutive launches inside one op; for an op that launches nothing, its whole duration.

CPU platforms (``sync_host``). There is no device: an op does its work synchronously on the calling thread, inside
the op calls nested in it, so the CPU cost of an op is its time minus the time of the op calls it makes. The nested
op calls play the role of the GPU's launches (direct cpu_op children of an op, in start order):

* T1: as on GPUs (the Python/framework gap between consecutive top-level ops on one thread), but every gap under
  T1_MAX_US is kept, none dropped from below: on a CPU consecutive ops really follow each other within 2 µs (over
  half the gaps of a small transformer's step; median ~1.9 µs), and the method's 2 µs floor doubled the mean T1
  (7.9 against 3.7 µs), over-pricing an op-dense step by ~10%.
* T2: op start -> start of its first direct child op.  T3: end of its last direct child -> op end.
* T5: gap between consecutive direct children; for an op without children, its whole duration.
* T4: none (a nested call is the work itself, not a launch of it).
* An optimizer range (torch's ``Optimizer.step#SGD.step`` annotation around an optimizer's step) holds Python of
  its own: SGD's and AdamW's loops over their parameters before the first op, ~0.2-0.7 ms in the quickstart's
  traces on the 48 MiB-L3 Intel host. The gap before its first op is seldom under T1_MAX_US, so T1 never held it.
  The range is sampled as a composite: its T2 (range start -> first direct child op) and T3 (last child end ->
  range end), by the range's name; the T1 of its first op is the gap up to the range's start, and of the op after
  it the gap from the range's end. The simulator adds T2 when an op enters a range and T3 when it leaves one
  (:mod:`simulator.timing`, RULES_VERSION 9).

So an op's duration = T2 + (its children's durations) + (the T5 gaps) + T3 exactly, and a predictor can compose
``time(op) = model(op)`` when it models the op as a whole (a microbenchmark of the whole call already contains its
T2/T3/T5: add only T1 before top-level ops), else ``T2 + sum(time(child)) + T5 per gap + T3`` (T5 alone for an op
without children). For that composition T2, T3 and T5 are extracted for every cpu_op at every depth on CPU
platforms; on GPU platforms for top-level ops only, as in the method.

Common to both: negative values are clamped to 0; samples are raw (profiler event costs are not subtracted); each
(op name, kind) keeps the samples within [Q1 - 1.5 IQR, Q3 + 1.5 IQR] for its mean, std and count. Why raw on a CPU
(measured on the 480 MiB-L3 Intel host, 2026-11-28, :mod:`collectors.workloads.profiler_tax`): the profiler as the
Kineto pass configures it adds 0.4-1.2 µs of wall time per recorded op event to a loop of small ops, but mostly in
rare long stalls that the IQR filter drops: a table rebuilt from the kept means exceeds the fastest unprofiled loop
by at most 0.2 µs per event. Subtracting even 4 µs from every sample of the 08:17 demo's traces moved DLRM world
size 1 from +25.7 to +18.9% and xlnet from -2.8 to -13.6%; the realistic 0.25-0.4 µs moved every family by under 3
points. The profiled steps' excess over the unprofiled ones (DLRM ~7 µs per event; later profiled iterations ~1.4x
the first) lies in the ops' own times, which microbenchmarks price, not in these samples. Kineto traces recorded
together with an execution trace ('kineto+et') are left out by default: the ET observer's cost lands inside op
durations there.

The profiled host path (GPU platforms). A profiler, and far more an ET observer recording in the same pass, slows
the host: every recorded op event costs it ~10-20 µs (a no-work ``aten::view`` lasts ~19 µs in the H200 joint
pass, ``aten::lift_fresh`` 12 µs) while kernels run at their speed. When the trace set was given its unprofiled
iteration time (``collect trace --measured-ms``) and the profiled iteration was host-bound (the device busy under
HOST_BOUND_SHARE of it), every sample of that trace is scaled by unprofiled / profiled iteration
(:func:`host_scale`): the host path then takes at most the unprofiled step, which it cannot exceed. Where the
unprofiled step was itself device-bound this is an upper bound of the host's pace (the H200 GPT-2 step: kernels
163.7 of 168.8 ms, so its table prices the host at most as slow as it can have been). Such joint traces are used
by default; joint traces without an unprofiled time only with ``include_joint`` (raw).

The host's pace measured apart (``host_pace``, ``pmdb fit overheads --host-pace``; :mod:`fitters.host_pace`): given
back-to-back timings of small eager ops measured WITHOUT a profiler on the same host and software, each GPU trace's
scale is instead the median over the op names both hold of (unprofiled per-call host time) / (what the trace's raw
table prices one call: T1 + T2 + T4 per launch + T5 + T3), never above the step's ratio where that applies (an upper
bound) nor 1. On the H200 trace with ``h200_launch_floor.csv`` (same day, same torch): 5 op names (add, mul,
softmax, layer_norm, linear), ratios 0.085-0.183, median 0.116 (the step's ratio: 0.290). Without a calibration, or
with fewer than two matched op names, the step's ratio stays (the fallback); ``params['host_scale']`` records per
trace which scale was used and why.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

from fitters.host_pace import Calibration, calibrate, read_pace, unprofiled_pace
from pmdb.traces.phases import STEP_RANGE_PREFIX
from pmdb.traces.opmap import tensor_elements
from pmdb.traces.rows import load_kernels, load_ops, top_level_mask, top_level_of
from pmdb import platform as platforms
from pmdb.platform import Semantics
from pmdb.traces.vocabulary import common
from pmdb.errors import PmdbError
from pmdb.store import Store

T1_MIN_US, T1_MAX_US = 2.0, 200.0   # the method's T1 window (GPU platforms)
CPU_T1_MIN_US = 0.0                 # CPU platforms: every gap from 0 µs (see the module docstring)
IQR_FACTOR = 1.5
HOST_BOUND_SHARE = 0.5              # a profiled iteration whose device was busy less than this share was host-bound
SAMPLE_COLUMNS = ["op_name", "kind", "op_id", "value_us"]
OP_FIELDS = ["op_id", "name", "parent_id", "thread", "category", "start_us", "dur_us"]
SIZED_KINDS = ("T2", "T3", "T5")    # CPU samples that carry their op's input size class (migration 0020)


def size_class(elements: int | None) -> int | None:
    """floor(log4(elements of an op's tensor inputs)), 0 below 4; None without tensor inputs. A CPU op's own time
    (T2, T3, T5) is kept per class too: where it is work, it grows with the inputs (migration 0020)."""
    if elements is None or elements < 1:
        return None
    return (int(elements).bit_length() - 1) // 2


def input_size_class(input_shapes: Any) -> int | None:
    """The :func:`size_class` of an op from its recorded input shapes (None without tensor inputs): how samples are
    keyed when fitted and how the simulator looks them up."""
    return size_class(tensor_elements(input_shapes))


def _samples(rows: list[tuple[str, str, int, float]]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=SAMPLE_COLUMNS)
    frame["value_us"] = frame["value_us"].astype(float).clip(lower=0.0)
    return frame


def t1_samples(ops: pd.DataFrame, top: pd.Series, min_us: float = T1_MIN_US,
               bounds: tuple[dict[int, float], dict[int, float]] = ({}, {})) -> list[tuple[str, str, int, float]]:
    """Gaps between consecutive top-level ops of each thread, inside the T1 window: over ``min_us`` (from 0 µs
    inclusive when ``min_us`` is 0) and under T1_MAX_US. ``bounds`` (:func:`range_bounds`): the gap before the first
    op of an optimizer range ends where the range starts, the gap after its last op starts where the range ends
    (the range's own time is its T2 and T3)."""
    begins, ends_after = bounds
    rows = []
    tops = ops[top].sort_values(["thread", "start_us", "op_id"])
    for _, group in tops.groupby("thread", sort=False):
        starts = group["start_us"].to_numpy(dtype=float)
        ends = starts + group["dur_us"].to_numpy(dtype=float)
        if begins or ends_after:   # only CPU traces with optimizer ranges
            ids = group["op_id"].astype(int)
            starts = ids.map(begins).fillna(group["start_us"]).to_numpy(dtype=float)
            ends = np.maximum(ends, ids.map(ends_after).to_numpy(dtype=float, na_value=-np.inf))
        gaps = starts[1:] - ends[:-1]
        for name, op_id, gap in zip(group["name"].iloc[1:], group["op_id"].iloc[1:], gaps):
            above = gap >= 0.0 if min_us <= 0.0 else gap > min_us
            if above and gap < T1_MAX_US:
                rows.append((name, "T1", int(op_id), float(gap)))
    return rows


def _split(ops: pd.DataFrame, inner: pd.DataFrame, owner: str) -> list[tuple]:
    """T2, T3, T5 gaps of each op of ``ops`` (in their order) around its inner calls (the rows of ``inner`` whose
    ``owner`` column is its op_id: launches or child ops, in start order), or T5 = whole time without any. One sort
    of all inner calls, not one per op (a GPU trace has tens of thousands of ops)."""
    inner = inner.dropna(subset=[owner])
    keys = inner[owner].to_numpy(dtype=np.int64)
    order = np.lexsort((inner["op_id"].to_numpy(), inner["start_us"].to_numpy(dtype=float), keys))
    keys = keys[order]
    starts = inner["start_us"].to_numpy(dtype=float)[order]
    ends = starts + inner["dur_us"].to_numpy(dtype=float)[order]
    cuts = np.flatnonzero(np.diff(keys)) + 1
    spans = dict(zip(keys[np.r_[0, cuts]].tolist(), zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(keys)].tolist()))
                 ) if len(keys) else {}
    rows: list[tuple] = []
    for op_id, name, start, dur in zip(ops["op_id"].astype(int).tolist(), ops["name"], ops["start_us"], ops["dur_us"]):
        end = start + dur
        span = spans.get(op_id)
        if span is None:
            rows.append((name, "T5", op_id, end - start))
            continue
        first, last = span
        rows += [(name, "T2", op_id, starts[first] - start), (name, "T3", op_id, end - ends[last - 1])]
        rows += [(name, "T5", op_id, gap) for gap in starts[first + 1:last] - ends[first:last - 1]]
    return rows


def _launches(ops: pd.DataFrame, kernels: pd.DataFrame, top: pd.Series) -> pd.DataFrame:
    """The runtime calls that launch device work (kernels, copies, memsets), with the top-level op each lies in
    (``top``; NaN for none)."""
    work = kernels[kernels["category"].isin(common().categories["work"])] if len(kernels) else kernels
    launch_ids = set(work["launch_op_id"].dropna().astype(int)) if len(work) else set()
    launches = ops[ops["op_id"].isin(launch_ids)]
    return launches.assign(top=launches["op_id"].map(_top_owner(ops, top)))


def gpu_samples(ops: pd.DataFrame, kernels: pd.DataFrame) -> pd.DataFrame:
    """T1-T5 of the top-level ops of a GPU trace (async_device semantics)."""
    top = top_level_mask(ops)
    launches = _launches(ops, kernels, top)
    rows = t1_samples(ops, top)
    rows += [(n, "T4", int(i), float(d)) for n, i, d in zip(launches["name"], launches["op_id"], launches["dur_us"])]
    rows += _split(ops[top], launches, "top")
    return _samples(rows)


def call_prices(stats: pd.DataFrame, ops: pd.DataFrame, kernels: pd.DataFrame, names: set[str]) -> dict[str, float]:
    """What an overhead table (``stats``: :func:`iqr_summary` of one GPU trace's samples) prices one top-level call
    of each op name in ``names`` on the host, as the simulator composes it: T1 + T2 + the T4 of each of its launches
    + T5 between them + T3 (T1 + T5 without launches; a kind the table lacks: its median over op names); the median
    over the trace's calls of that name (µs)."""
    table = stats.set_index(["op_name", "kind"])["mean_us"]
    typical = stats.groupby("kind")["mean_us"].median()

    def get(name: str, kind: str) -> float:
        value = table.get((name, kind))
        return float(value) if value is not None else float(typical.get(kind, 0.0))

    top = top_level_mask(ops)
    calls = ops[top & ops["name"].isin(names)]
    apis = {int(k): v for k, v in _launches(ops, kernels, top).dropna(subset=["top"]).groupby("top")["name"]
            .agg(list).items()}
    prices: dict[str, list[float]] = {}
    for op_id, name in zip(calls["op_id"].astype(int), calls["name"]):
        launched = apis.get(op_id, [])
        own = (get(name, "T2") + get(name, "T3") + sum(get(a, "T4") for a in launched)
               + get(name, "T5") * (len(launched) - 1)) if launched else get(name, "T5")
        prices.setdefault(name, []).append(get(name, "T1") + own)
    return {name: float(np.median(values)) for name, values in prices.items()}


def step_ranges(ops: pd.DataFrame) -> pd.DataFrame:
    """The optimizer ranges of a trace (annotations named ``Optimizer.*``: :func:`pmdb.traces.phases.optimizer_range`)."""
    named = ops["name"].astype(str).str.startswith(STEP_RANGE_PREFIX)
    return ops[named & (ops["category"] != "cpu_op")]


def range_bounds(ranges: pd.DataFrame, cpu: pd.DataFrame) -> tuple[dict[int, float], dict[int, float]]:
    """({first direct child op of a range: the range's start}, {last direct child op: the range's end}) in µs."""
    begins: dict[int, float] = {}
    ends: dict[int, float] = {}
    spans = ranges.set_index("op_id")[["start_us", "dur_us"]]
    children = cpu[cpu["parent_id"].isin(spans.index)].sort_values(["start_us", "op_id"])
    for range_id, kids in children.groupby("parent_id", sort=False):
        start, dur = spans.loc[int(range_id)]
        begins[int(kids["op_id"].iloc[0])] = float(start)
        ends[int(kids["op_id"].iloc[-1])] = float(start + dur)
    return begins, ends


def cpu_samples(ops: pd.DataFrame) -> pd.DataFrame:
    """T1, T2, T3, T5 of every cpu_op of a CPU trace (sync_host semantics: direct child ops play the launches),
    and T2 and T3 of its optimizer ranges (their own time before their first op and after their last). Each T2, T3
    and T5 sample of an op with tensor inputs carries its :func:`size_class` (``ops``' ``input_shapes``, where
    loaded; else none does)."""
    top = top_level_mask(ops)
    cpu = ops[ops["category"] == "cpu_op"]
    ranges = step_ranges(ops)
    rows = t1_samples(ops, top, CPU_T1_MIN_US, range_bounds(ranges, cpu))
    rows += _split(cpu, cpu, "parent_id")
    rows += [row for row in _split(ranges, cpu, "parent_id") if row[1] in ("T2", "T3")]
    frame = _samples(rows)
    classes: dict[int, int | None] = {}
    if "input_shapes" in cpu:
        classes = {int(i): input_size_class(shapes) for i, shapes in zip(cpu["op_id"], cpu["input_shapes"])}
    sized = frame["kind"].isin(SIZED_KINDS)
    frame["size_class"] = pd.array([classes.get(int(i)) if k else None for i, k in zip(frame["op_id"], sized)],
                                   dtype="Int64")
    return frame


def _top_owner(ops: pd.DataFrame, top: pd.Series) -> dict[int, int]:
    """op_id -> the top-level op it lies in (for launch calls)."""
    owner = top_level_of(ops)
    return {int(i): int(o) for i, o in zip(ops["op_id"], owner) if not pd.isna(o)}


def iqr_summary(samples: pd.DataFrame, keys: tuple[str, ...] = ("op_name", "kind")) -> pd.DataFrame:
    """Mean, std and count per ``keys`` (op_name, kind) of the samples within [Q1 - k IQR, Q3 + k IQR]."""
    out = []
    for key, group in samples.groupby(list(keys), sort=True):
        values = group["value_us"].to_numpy()
        q1, q3 = np.percentile(values, [25, 75])
        spread = IQR_FACTOR * (q3 - q1)
        kept = values[(values >= q1 - spread) & (values <= q3 + spread)]
        out.append({**dict(zip(keys, key)), "mean_us": float(kept.mean()),
                    "std_us": float(kept.std(ddof=1)) if len(kept) > 1 else None, "count": int(len(kept))})
    return pd.DataFrame(out, columns=[*keys, "mean_us", "std_us", "count"])


def sized_summary(samples: pd.DataFrame) -> pd.DataFrame:
    """:func:`iqr_summary` per (op_name, kind, size_class) of the samples that carry a size class (CPU T2, T3,
    T5; migration 0020's overhead_sizes)."""
    keys = ("op_name", "kind", "size_class")
    if "size_class" not in samples:   # a GPU platform's samples
        return pd.DataFrame(columns=[*keys, "mean_us", "std_us", "count"])
    return iqr_summary(samples[samples["size_class"].notna()].astype({"size_class": int}), keys)


STEP, CALIBRATED, NONE = "unprofiled/profiled step", "back-to-back calibration", "none"


@dataclass(frozen=True)
class HostScale:
    """How one Kineto trace's host-side samples are corrected (``method``, and ``why``): ``scale`` = unprofiled /
    profiled iteration when the profiled iteration was host-bound (device busy share under HOST_BOUND_SHARE), the
    back-to-back calibration (:mod:`fitters.host_pace`) where one was given, else 1. Times µs."""

    trace_id: int
    profiled_us: float | None     # median profiled iteration of the trace
    unprofiled_us: float | None   # the set's unprofiled iteration, given at import
    device_busy: float | None     # device work (kernels, copies, memsets) / profiled iterations
    scale: float = 1.0
    method: str = NONE
    why: str = ""
    step_scale: float | None = None          # unprofiled / profiled iteration where it applies (an upper bound)
    calibration: dict[str, Any] | None = None  # host_pace.Calibration.record()


def host_scale(store: Store, trace_id: int) -> HostScale:
    """The correction of one trace's T1-T5 samples for the profiler's (and a joint ET's) slowing of the host."""
    row = store.query(
        "SELECT s.given_measured_us AS unprofiled, median(i.dur_us) AS profiled, sum(i.dur_us) AS total, "
        "(SELECT sum(k.dur_us) FROM trace_kernels k JOIN trace_iterations j ON j.trace_id = k.trace_id "
        " AND k.start_us >= j.start_us AND k.start_us < j.start_us + j.dur_us "
        " WHERE k.trace_id = t.trace_id AND list_contains(?, k.category)) AS busy "
        "FROM traces t JOIN trace_sets s USING (trace_set_id) "
        "LEFT JOIN trace_iterations i ON i.trace_id = t.trace_id WHERE t.trace_id = ? "
        "GROUP BY t.trace_id, s.given_measured_us", [list(common().categories["work"]), int(trace_id)])
    if row.empty:
        return HostScale(int(trace_id), None, None, None)
    r = row.iloc[0]
    unprofiled, profiled = _num(r["unprofiled"]), _num(r["profiled"])
    busy = None if _num(r["total"]) is None else (_num(r["busy"]) or 0.0) / float(r["total"])
    if not (unprofiled and profiled):
        return HostScale(int(trace_id), profiled, unprofiled, busy, why="no unprofiled iteration time (--measured-ms)")
    if busy is None or busy >= HOST_BOUND_SHARE:
        return HostScale(int(trace_id), profiled, unprofiled, busy,
                         why=f"the profiled iteration was not host-bound (device busy >= {HOST_BOUND_SHARE:.0%})")
    scale = min(1.0, unprofiled / profiled)
    return HostScale(int(trace_id), profiled, unprofiled, busy, scale, STEP,
                     "host-bound profiled iteration: the host path fits in the unprofiled step (an upper bound of "
                     "the host's pace when that step is device-bound)", scale)


def calibrated(scaled: HostScale, calibration: Calibration) -> HostScale:
    """``scaled`` with the back-to-back calibration's scale where it has one, never above the step's ratio (the
    host path cannot exceed the unprofiled step) nor 1; else ``scaled`` (the fallback) with the reason recorded."""
    record = calibration.record()
    if calibration.scale is None:
        return replace(scaled, calibration=record, why=f"{scaled.why}; no back-to-back calibration: {calibration.why}")
    bound = scaled.step_scale if scaled.step_scale is not None else 1.0
    why = f"{calibration.why} ({calibration.source}): the host's unprofiled pace measured apart from this step"
    if calibration.scale > bound:
        why += f"; capped at {bound:.3f} (the unprofiled/profiled step ratio, an upper bound)"
    return replace(scaled, scale=min(calibration.scale, bound), method=CALIBRATED, why=why, calibration=record)


def _num(value: Any) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def platform_traces(store: Store, platform: str, include_joint: bool) -> pd.DataFrame:
    """Kineto traces of completed trace sets of the platform; joint Kineto+ET passes when their set was given its
    unprofiled iteration time (their host path is scaled, :func:`host_scale`), or any if ``include_joint``."""
    return store.query(
        "SELECT t.trace_id, t.profiled_with FROM traces t JOIN trace_sets s USING (trace_set_id) "
        "JOIN collection_runs r ON r.run_id = t.run_id JOIN collection_runs sr ON sr.run_id = s.run_id "
        "WHERE s.platform = ? AND t.kind = 'kineto' AND r.status = 'completed' AND sr.status = 'completed' "
        "AND (t.profiled_with IS DISTINCT FROM 'kineto+et' OR s.given_measured_us IS NOT NULL OR ?) "
        "ORDER BY t.trace_id", [platform, include_joint])


def require_traces(store: Store, platform: str, include_joint: bool = False) -> pd.DataFrame:
    """:func:`platform_traces`; a one-line PmdbError when there are none (checked before a run row is made)."""
    traces = platform_traces(store, platform, include_joint)
    if traces.empty:
        joint = "" if include_joint else (" (Kineto traces recorded with an ET and no unprofiled time, "
                                          "--measured-ms, are left out; --include-joint uses them)")
        raise PmdbError(f"no Kineto traces of platform {platform!r} in the store{joint}; "
                        f"import some with `pmdb collect trace` or record a workload")
    return traces


def fit_overheads(store: Store, run_id: str, platform: str, *, include_joint: bool = False,
                  host_pace: Path | None = None) -> dict[str, Any]:
    """Extract, filter and store a new overhead version of ``platform``; returns a summary (version, counts).
    ``host_pace``: back-to-back timings measured without a profiler on the host that recorded the traces; each GPU
    trace's samples are then scaled by their calibration (:func:`calibrated`) instead of the step's ratio."""
    semantics = platforms.load(store, platform).semantics
    if host_pace is not None and semantics is Semantics.SYNC_HOST:
        raise PmdbError(f"--host-pace calibrates a GPU's profiled host path; {platform} is a CPU platform")
    pace = None if host_pace is None else unprofiled_pace(read_pace(host_pace))
    traces = require_traces(store, platform, include_joint)
    parts, scales = [], []
    for trace_id in tqdm(traces["trace_id"].astype(int), desc="extracting overheads", unit="trace", disable=None):
        ops = load_ops(store, trace_id,
                       columns=OP_FIELDS + ["input_shapes"] if semantics is Semantics.SYNC_HOST else OP_FIELDS)
        if semantics is Semantics.SYNC_HOST:
            found = cpu_samples(ops)
        else:
            kernels = load_kernels(store, trace_id)
            found = gpu_samples(ops, kernels)
            scaled = host_scale(store, trace_id)
            if pace is not None:
                prices = call_prices(iqr_summary(found), ops, kernels, set(pace))
                scaled = calibrated(scaled, calibrate(Path(host_pace).name, pace, prices))
            found["value_us"] = found["value_us"] * scaled.scale
            scales.append(asdict(scaled))
        parts.append(found.assign(trace_id=trace_id))
    samples = pd.concat(parts, ignore_index=True)
    stats = iqr_summary(samples)
    t1_min = CPU_T1_MIN_US if semantics is Semantics.SYNC_HOST else T1_MIN_US
    params = {"t1_window_us": [t1_min, T1_MAX_US], "iqr_factor": IQR_FACTOR, "include_joint": include_joint,
              "scope": "every cpu_op" if semantics is Semantics.SYNC_HOST else "top-level ops"}
    if host_pace is not None:
        params["host_pace"] = Path(host_pace).name
    if scales:
        params["host_scale"] = scales   # per trace: profiled / unprofiled iteration (µs), device busy, scale, method
    version = int(store.insert_one("overhead_versions", {
        "run_id": run_id, "platform": platform, "semantics": semantics.value,
        "trace_ids": traces["trace_id"].astype(int).tolist(), "params": params}, returning="overhead_version"))
    store.insert("overhead_samples", samples.assign(overhead_version=version))
    store.insert("overheads", stats.assign(overhead_version=version))
    sized = sized_summary(samples)
    store.insert("overhead_sizes", sized.assign(overhead_version=version))
    return {"overhead_version": version, "semantics": semantics, "traces": len(traces), "samples": len(samples),
            "sized": len(sized), "host_scale": scales,
            "kept": int(stats["count"].sum()), "ops": int(stats["op_name"].nunique()),
            "by_kind": {k: int(v) for k, v in stats.groupby("kind")["count"].sum().items()}}


def log_overhead_version(store: Store, version: int) -> str:
    """Log a stored overhead version as one MLflow run in the experiment ``pmdb-overheads`` (tags: overhead_version,
    platform, the store's run; metrics per kind T1-T5: op names, samples kept, median over op names of the mean, µs);
    the MLflow run id."""
    from fitters.mlflow_runs import OVERHEADS_EXPERIMENT, RunRecord, log_runs

    row = store.query("SELECT run_id, platform, semantics, trace_ids, params FROM overhead_versions "
                      "WHERE overhead_version = ?", [int(version)]).iloc[0]
    kinds = store.query("SELECT kind, count(*) AS ops, sum(count) AS kept, median(mean_us) AS median_mean_us "
                        "FROM overheads WHERE overhead_version = ? GROUP BY kind ORDER BY kind", [int(version)])
    metrics: dict[str, Any] = {"traces": len(row["trace_ids"]), "samples_kept": float(kinds["kept"].sum())}
    for kind in kinds.itertuples(index=False):
        metrics |= {f"{kind.kind}_ops": kind.ops, f"{kind.kind}_samples_kept": kind.kept,
                    f"{kind.kind}_median_mean_us": kind.median_mean_us}
    params = row["params"] if isinstance(row["params"], dict) else json.loads(row["params"] or "{}")
    record = RunRecord(
        f"overheads v{int(version)} of {row['platform']} (run {row['run_id']})",
        tags={"overhead_version": int(version), "platform": row["platform"], "semantics": row["semantics"],
              "pmdb.run": row["run_id"], "pmdb.command": f"pmdb fit overheads --platform {row['platform']}"},
        params={**params, "trace_ids": ",".join(str(int(t)) for t in row["trace_ids"])}, metrics=metrics)
    return log_runs(store, OVERHEADS_EXPERIMENT, [record])[0]


SAMPLE_FIELDS = ["op_name", "kind", "mean_us", "std_us", "count"]


def export_version(store: Store, version: int, source: dict[str, Any]) -> dict[str, Any]:
    """One stored overhead version as the JSON object a shipped sample holds (µs): its platform, the platform's spec
    sheet, the extraction settings, ``source`` (provenance) and the IQR-filtered table."""
    from collectors import gpu_specs

    row = store.query("SELECT platform, semantics, params FROM overhead_versions WHERE overhead_version = ?",
                      [int(version)]).iloc[0]
    sheet = gpu_specs.load(store, row["platform"])
    table = store.query("SELECT op_name, kind, mean_us, std_us, count FROM overheads WHERE overhead_version = ? "
                        "ORDER BY op_name, kind", [int(version)])
    params = row["params"] if isinstance(row["params"], dict) else json.loads(row["params"] or "{}")
    rows = [[r.op_name, r.kind, round(float(r.mean_us), 3), None if pd.isna(r.std_us) else round(float(r.std_us), 3),
             int(r.count)] for r in table.itertuples(index=False)]
    return {"platform": row["platform"], "semantics": row["semantics"],
            "spec_sheet": None if sheet is None else {k: v for k, v in asdict(sheet).items() if v is not None},
            "source": source, "params": params, "fields": SAMPLE_FIELDS, "overheads": rows}


def read_sample(path: Path) -> dict[str, Any]:
    """A shipped overhead sample (:func:`export_version`'s object); a one-line error when it is not one."""
    try:
        data = json.loads(Path(path).read_text())
        assert data["fields"] == SAMPLE_FIELDS and data["overheads"] and data["platform"]
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as exc:
        raise PmdbError(f"{path}: not a pmdb overhead sample ({type(exc).__name__})") from None
    return data


def store_sample(store: Store, path: Path) -> int:
    """Store a shipped overhead sample as a new overhead version of its platform (registered from the sample's spec
    sheet when the store lacks it), under its own 'overheads' run; returns the version. Samples are not stored
    (no traces): the version's ``trace_ids`` is empty and its params name the file and its provenance."""
    from collectors import gpu_specs

    data = read_sample(path)
    name = data["platform"]
    if store.scalar("SELECT count(*) FROM platforms WHERE name = ?", [name]) == 0:
        sheet = gpu_specs.GpuSheet(**data["spec_sheet"])
        gpu_specs.register(store, sheet, name, source="spec-sheet", source_file=str(path))
    table = pd.DataFrame(data["overheads"], columns=SAMPLE_FIELDS)
    with store.run("overheads", name, {"sample": str(path)}) as run:
        params = {**data["params"], "sample": Path(path).name, "source": data["source"]}
        version = int(store.insert_one("overhead_versions", {
            "run_id": run.run_id, "platform": name, "semantics": data["semantics"], "trace_ids": [],
            "params": params}, returning="overhead_version"))
        store.insert("overheads", table.assign(overhead_version=version))
        run.summary = {"overhead_version": version, "sample": str(path), "ops": int(table["op_name"].nunique())}
    return version
