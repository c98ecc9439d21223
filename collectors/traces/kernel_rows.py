"""Kernel rows mined from stored GPU traces (``pmdb collect mine-traces``): every traced op instance that launched
device work becomes an ``op_measurements`` row of the trace set's platform, so kernel models can be fitted on a GPU
from traces alone. Times are µs.

The ops are the units the GPU simulator times (:class:`pmdb.traces.units.RankUnits`: top-level CPU ops in start
order, an op around a collective replaced by its children), over the whole Kineto trace (every iteration, marked or
not). Each is mapped with :func:`pmdb.traces.opmap.map_op`, the mapping the simulator and the ops collector's
``--from-traces`` use, to (op, pass, params). An op that maps to no model (None, or NO_WORK: a view, AccumulateGrad)
is replaced by its nested ops, recursively, each owning the device work launched inside it. A mapped op that
launched at least one non-communication device event (kernel, memcpy, memset) gives one row: ``median_us`` = the
sum of those events' durations (device time, not their span), ``kernels`` = [{"name", "us"}] in launch order,
cache state 'device', source 'trace', ``trace_id`` / ``trace_op_id`` = the Kineto op. Shapes come from the op's
Kineto ``Input Dims`` or its linked execution-trace node; an op with neither is not mined (a trace without shapes
maps every elementwise op to a 1x1 tensor). Embedding lookups are not mined: their per-table statistics are not in
a trace. An autograd node that maps to no model is replaced by its nested ops too, but one of them that maps to a
forward op (the ``aten::mm`` computing dX or dW of an ``MmBackward0`` whose sizes were not recorded) is not mined:
its time is a backward GEMM's, of another layout, and would pass for a forward call's (:data:`LAYOUT_OPS`; an
element-wise op nested there runs the forward's kernel and is mined).

Every requested set is checked and mined in memory first; the new rows of a platform are then written in ONE
transaction of one 'mine-traces' run. An op already mined by a completed run is not mined again.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from collectors.comms.store_rows import write_atomic
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store
from pmdb.traces.gc_pause import collector_paused
from pmdb.traces.graph import Op
from pmdb.traces.opmap import BACKWARD_PREFIX, NO_WORK, Mapped, map_op
from pmdb.traces.set_rows import load_rank_frames, trace_set_info
from pmdb.traces.units import RankUnits
from pmdb.traces.vocabulary import common

KIND = "mine-traces"
SOURCE = "trace"
NO_SHAPES = "no shapes (op not linked to the execution trace, no Kineto Input Dims)"
_DTYPES = {"float": "float32", "float32": "float32", "double": "float64", "float64": "float64", "half": "float16",
           "c10::half": "float16", "float16": "float16", "c10::bfloat16": "bfloat16", "bfloat16": "bfloat16"}
_TENSOR_TYPE = re.compile(r"Tensor\(([^)]+)\)")
# ops whose backward runs other kernels than their forward (GEMM layouts nn/nt instead of tn, weight-gradient
# convolutions): one nested in an unmapped autograd node is not a forward call (an element-wise op there is)
LAYOUT_OPS = ("fully_connected", "bmm", "conv1d", "conv2d")


@dataclass
class MinedOp:
    """One traced op instance as a kernel measurement (``time_us``: summed device time of its events, µs)."""

    op: str
    pass_: str
    params: dict[str, float | int]
    time_us: float
    kernels: list[dict[str, Any]]      # [{"name", "us"}] in launch order
    trace_id: int                      # Kineto trace the op was timed in
    op_id: int                         # its Kineto trace_ops.op_id
    dtype: str = "float32"
    device: str = "cuda:0"
    implementation: str = "torch"


@dataclass
class SetMining:
    """What mining one trace set found: rows, and where the device time of its events went (µs)."""

    trace_set_id: int
    platform: str
    rows: list[MinedOp] = field(default_factory=list)   # every mineable op (new or mined before)
    new: list[MinedOp] = field(default_factory=list)    # not yet in the store
    events: int = 0                                      # non-communication device events of the set
    device_us: float = 0.0                               # their summed duration
    mined_events: int = 0                                # events that went into a row
    mined_us: float = 0.0
    skipped: Counter = field(default_factory=Counter)    # reason -> events not mined
    skipped_us: Counter = field(default_factory=Counter)  # reason -> their µs

    def skip(self, reason: str, events: list[tuple]) -> None:
        if events:
            self.skipped[reason] += len(events)
            self.skipped_us[reason] += sum(e[_DUR] for e in events)


@dataclass
class MiningReport:
    """The sets mined, and per platform the run that stored their new rows (none when nothing was new)."""

    sets: list[SetMining]
    runs: dict[str, str] = field(default_factory=dict)   # platform -> run_id

    @property
    def rows_written(self) -> int:
        return sum(len(s.new) for s in self.sets)


# a device event: (op_id of the innermost CPU op around its launch, name, duration µs, device index)
_OP, _NAME, _DUR, _DEVICE = range(4)


def _work_events(kernels: pd.DataFrame) -> pd.DataFrame:
    """Non-communication device work (kernels, copies, memsets) in launch order."""
    if not len(kernels):
        return kernels
    work = kernels[kernels["category"].isin(common().categories["work"]) & ~kernels["is_collective"].astype(bool)]
    return work.sort_values(["launch_start_us", "kernel_index"], na_position="last")


def gpu_trace_sets(store: Store, trace_set_ids: list[int] | None) -> list[tuple[int, str]]:
    """(trace set, platform) to mine: the given completed sets, or (None) every completed set of a cuda platform
    with device work. PmdbError for an unknown set, a set of a CPU platform or a set without GPU kernels."""
    counts = dict(store.conn.execute(
        "SELECT t.trace_set_id, count(*) FROM trace_kernels k JOIN traces t USING (trace_id) "
        "JOIN collection_runs r ON r.run_id = t.run_id WHERE r.status = 'completed' AND NOT k.is_collective "
        "AND k.category IN (SELECT unnest(?::VARCHAR[])) GROUP BY 1", [sorted(common().categories["work"])]).fetchall())
    if trace_set_ids is None:
        frame = store.query("SELECT s.trace_set_id, s.platform FROM v_trace_sets s JOIN platforms p ON "
                            "p.name = s.platform WHERE p.device_kind = 'cuda' ORDER BY s.trace_set_id")
        found = [(int(i), str(p)) for i, p in zip(frame["trace_set_id"], frame["platform"]) if counts.get(int(i))]
        if not found:
            raise PmdbError("no completed trace set of a cuda platform holds GPU kernels: import one with "
                            "`pmdb collect trace --kineto FILE --et FILE --platform NAME`")
        return found
    out = []
    for trace_set_id in dict.fromkeys(int(i) for i in trace_set_ids):
        info = trace_set_info(store, trace_set_id)   # refuses unknown and unfinished sets
        platform = platforms.load(store, str(info["platform"]))
        if platform.device_kind != "cuda":
            raise PmdbError(f"trace set {trace_set_id} is on {platform.name}, a {platform.device_kind} platform: "
                            f"kernel rows are mined from GPU traces only")
        if not counts.get(trace_set_id):
            raise PmdbError(f"trace set {trace_set_id} holds no GPU kernels (no device events in its Kineto "
                            f"trace): nothing to mine")
        out.append((trace_set_id, platform.name))
    return out


def _dtype(node: Op) -> str:
    """Element type of the op's first floating-point tensor input (its own types, else its nested ops'); float32
    when none is recorded."""
    stack = [node]
    while stack:
        current = stack.pop(0)
        types = current.attrs.get("input_types")
        for text in types if isinstance(types, list) else []:
            found = _TENSOR_TYPE.search(str(text))   # ET: 'Tensor(float)'; Kineto 'Input type': 'float'
            name = (found.group(1) if found else str(text)).strip().lower()
            if name in _DTYPES:
                return _DTYPES[name]
        stack.extend(current.sub)
    return "float32"


def stored_params(params: dict[str, Any]) -> dict[str, float | int] | None:
    """Mapped parameters as a mined row stores them (whole numbers as int, as the collectors and importers store
    them); None when one is not a finite number."""
    out: dict[str, float | int] = {}
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            return None
        out[key] = int(value) if float(value).is_integer() else float(value)
    return out


def shape_key(op: str, pass_: str, params: dict[str, Any]) -> str | None:
    """The exact shape of a mined row, or of a traced op the simulator prices: canonical JSON of (op, pass,
    stored params); None when a parameter is not a finite number. Mined rows of one shape from any trace of the
    platform share it (implementation, dtype and threads are not part of it: see
    :class:`simulator.measured_shapes.ShapeMedians`)."""
    stored = stored_params(params)
    if stored is None:
        return None
    return json.dumps([op, pass_, stored], sort_keys=True, separators=(",", ":"))


def _params(mapped: Mapped) -> dict[str, float | int] | None:
    """The mapped parameters as stored (:func:`stored_params`)."""
    return stored_params(mapped.params)


def config_key(op: MinedOp) -> str:
    """sha256 of the canonical (op, pass, implementation, dtype, threads=null, config) JSON: the key the ops
    collector and the importers give the same configuration of a GPU timing."""
    text = json.dumps({"op": op.op, "pass": op.pass_, "implementation": op.implementation, "dtype": op.dtype,
                       "threads": None, "config": op.params}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class _RankMiner:
    """Mines one rank: units -> (op, pass, params) + the device events each launched."""

    def __init__(self, units: RankUnits, trace_id: int, out: SetMining):
        self.units = units
        self.trace_id = trace_id
        self.out = out

    def shaped(self, op_id: int) -> bool:
        """True when the op's shapes were recorded (Kineto Input Dims or a linked execution-trace node)."""
        return isinstance(self.units.col(op_id, "input_shapes"), list) or self.units.twin(op_id) is not None

    def unit(self, unit: int, events: list[tuple]) -> None:
        units = self.units
        shapes, attrs, _ = units.shapes(unit)
        node = Op(name=units.col(unit, "name"), input_shapes=shapes, attrs=attrs, children=units.nested_ops(unit),
                  op_id=unit, sub=units.sub_ops(unit))
        self.node(node, events)

    def node(self, node: Op, events: list[tuple], backward: str | None = None) -> None:
        """A row for ``node`` when it maps to a model, else its nested ops' rows (events: those launched inside;
        ``backward``: the autograd node they run in, whose unmapped work must not pass for forward rows)."""
        if not events:
            return
        shaped = self.shaped(int(node.op_id))
        mapped = map_op(node) if shaped else None
        if isinstance(mapped, Mapped) and mapped.pass_ == "fwd" and backward is not None and mapped.op in LAYOUT_OPS:
            # e.g. the aten::mm calls of an MmBackward0 whose own sizes were not recorded: they compute dX and dW
            self.out.skip(f"{mapped.op} fwd inside {backward} (a backward's work, not a forward call)", events)
            return
        if isinstance(mapped, Mapped) and mapped.op != "embedding_lookup":
            params = _params(mapped)
            if params is None:
                self.out.skip(f"{mapped.op}: parameters that are not finite numbers", events)
                return
            device = events[0][_DEVICE]
            self.out.rows.append(MinedOp(
                mapped.op, mapped.pass_, params, float(sum(e[_DUR] for e in events)),
                [{"name": e[_NAME], "us": float(e[_DUR])} for e in events], self.trace_id, int(node.op_id),
                _dtype(node), "cuda:0" if pd.isna(device) else f"cuda:{int(device)}"))
            self.out.mined_events += len(events)
            self.out.mined_us += sum(e[_DUR] for e in events)
            return
        if node.sub:
            left = list(events)
            if backward is None and str(node.name).startswith(BACKWARD_PREFIX):
                backward = str(node.name)[len(BACKWARD_PREFIX):]
            for child in node.sub:
                inside = {int(child.op_id), *self.units.descendants(int(child.op_id))}
                mine = [e for e in left if e[_OP] in inside]
                if mine:
                    left = [e for e in left if e[_OP] not in inside]
                    self.node(child, mine, backward)
            self.out.skip(f"launched by {node.name} itself (no model for it)" if shaped else NO_SHAPES, left)
        elif not shaped:
            self.out.skip(NO_SHAPES, events)
        elif isinstance(mapped, Mapped):
            self.out.skip("embedding_lookup: per-table statistics are not in a trace", events)
        elif mapped is NO_WORK:
            self.out.skip(f"view/metadata op {node.name} launched device work", events)
        else:
            self.out.skip(f"no model for {node.name}", events)


@collector_paused()   # rows and ops by the 10^5 (pmdb.traces.gc_pause)
def mine_trace_set(store: Store, trace_set_id: int, platform: str) -> SetMining:
    """Every mineable op of a stored trace set (read only; ``new`` is filled by :func:`mine_traces`)."""
    out = SetMining(int(trace_set_id), platform)
    frames = load_rank_frames(store, int(trace_set_id), None, shapes=True)
    for rank in sorted(frames):
        frame = frames[rank]
        if frame.kineto_ops is None or frame.kineto_trace_id is None:
            continue
        work = _work_events(frame.kernels)
        if not len(work):
            continue
        events = list(zip([None if pd.isna(v) else int(v) for v in work["op_id"]], work["name"],
                          work["dur_us"].astype(float), work["device"]))
        out.events += len(events)
        out.device_us += float(work["dur_us"].sum())
        units = RankUnits(frame, True)
        by_unit: dict[int, list[tuple]] = {}
        outside = []
        for event in events:
            unit = units.unit_of.get(event[_OP]) if event[_OP] is not None else None
            if unit is None:
                outside.append(event)
            else:
                by_unit.setdefault(unit, []).append(event)
        out.skip("launched outside any CPU op", outside)
        miner = _RankMiner(units, int(frame.kineto_trace_id), out)
        for unit in units.units:
            if unit in by_unit:
                if bool(units.col(unit, "is_collective")):
                    out.skip("inside a collective op", by_unit[unit])
                else:
                    miner.unit(unit, by_unit[unit])
    return out


def _row(op: MinedOp, platform: str, run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "platform": platform, "op": op.op, "pass": op.pass_,
            "implementation": op.implementation, "dtype": op.dtype, "device": op.device, "cache_state": "device",
            "params": json.dumps(op.params, sort_keys=True), "config_key": config_key(op), "median_us": op.time_us,
            "mean_us": op.time_us, "min_us": op.time_us, "repetitions": 1, "kernels": json.dumps(op.kernels),
            "source": SOURCE, "trace_id": op.trace_id, "trace_op_id": op.op_id}


def _already_mined(store: Store, trace_ids: list[int]) -> set[tuple[int, int]]:
    """(trace_id, trace_op_id) of ops of these traces mined by completed runs."""
    if not trace_ids:
        return set()
    rows = store.conn.execute("SELECT DISTINCT trace_id, trace_op_id FROM v_op_measurements WHERE source = ? AND "
                              "trace_id IN (SELECT unnest(?::BIGINT[]))", [SOURCE, trace_ids]).fetchall()
    return {(int(t), int(o)) for t, o in rows}


def mine_traces(store: Store, trace_set_ids: list[int] | None = None) -> MiningReport:
    """Mine the given trace sets (None: every GPU trace set) into op_measurements; one atomic 'mine-traces' run per
    platform with new rows. Every set is checked and mined before anything is written."""
    chosen = gpu_trace_sets(store, trace_set_ids)
    sets = [mine_trace_set(store, trace_set_id, platform) for trace_set_id, platform in chosen]
    if trace_set_ids is not None:
        empty = [s for s in sets if not s.rows]
        if empty:
            first = empty[0]
            reasons = "; ".join(f"{reason}: {count} events" for reason, count in first.skipped.most_common(3))
            raise PmdbError(f"trace set {first.trace_set_id}: no op with a model and recorded shapes launched a GPU "
                            f"kernel ({reasons}); import the execution trace too (--et) or record Kineto with "
                            f"record_shapes=True")
    done = _already_mined(store, sorted({r.trace_id for s in sets for r in s.rows}))
    for mining in sets:
        seen: set[tuple[int, int]] = set()
        for row in mining.rows:
            key = (row.trace_id, row.op_id)
            if key not in done and key not in seen:
                seen.add(key)
                mining.new.append(row)
    report = MiningReport(sets)
    for platform in dict.fromkeys(s.platform for s in sets):
        mine = [s for s in sets if s.platform == platform and s.new]
        if not mine:
            continue
        args = {"trace_sets": [s.trace_set_id for s in mine], "all": trace_set_ids is None}
        with store.run(KIND, platform, args) as run:
            rows = [_row(op, platform, run.run_id) for s in mine for op in s.new]
            write_atomic(store, [("op_measurements", rows)])
            run.summary = {"rows": len(rows), "trace_sets": {str(s.trace_set_id): len(s.new) for s in mine},
                           "ops": dict(Counter(f"{r['op']}.{r['pass']}" for r in rows))}
        report.runs[platform] = run.run_id
    return report


def summary_frame(report: MiningReport) -> pd.DataFrame:
    """Per trace set, op and pass: rows mined now, rows in all (with earlier runs), distinct configs, device µs."""
    records = []
    for mining in report.sets:
        new = {(r.trace_id, r.op_id) for r in mining.new}
        for row in mining.rows:
            records.append({"trace_set": mining.trace_set_id, "op": row.op, "pass": row.pass_,
                            "new": (row.trace_id, row.op_id) in new, "us": row.time_us,
                            "config": json.dumps(row.params, sort_keys=True)})
    if not records:
        return pd.DataFrame(columns=["trace_set", "op", "pass", "new_rows", "rows", "configs", "device_us"])
    frame = pd.DataFrame(records)
    return (frame.groupby(["trace_set", "op", "pass"], sort=True)
            .agg(new_rows=("new", "sum"), rows=("new", "size"), configs=("config", "nunique"), device_us=("us", "sum"))
            .reset_index())

