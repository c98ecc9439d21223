"""The Kineto (Chrome trace JSON) parser: one parser for every schemaVersion, driven by the field and argument
names of ``schemas/kineto_<v>.json``. Times are µs as the trace gives them (trace clock).

Complete events ('X') are classed by category (``pmdb/traces/vocabulary.json``): CPU-side ops, annotations and runtime calls
become op rows (nested per thread by time containment), device-side events become kernel rows linked to their
launch call through the correlation id. Events of other categories are counted and left out.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from numbers import Real
from typing import Any

import numpy as np
import pandas as pd

from collectors.traces import schemas
from collectors.traces.files import read_top_level
from pmdb.traces.vocabulary import Vocabulary, common as vocabulary
from pmdb.errors import PmdbError
from pmdb.traces.iterations import kineto_iterations

NEST_EPS_US = 1e-3  # timestamps are rounded to ns; a child may end this much after its parent


@dataclass
class KinetoTrace:
    """A parsed Kineto trace: CPU-side ``ops``, device ``kernels``, complete ``iterations`` (all times µs)."""

    version: str
    ops: pd.DataFrame
    kernels: pd.DataFrame
    iterations: pd.DataFrame
    rank: int | None = None
    world_size: int | None = None
    ignored: dict[str, int] = field(default_factory=dict)
    host: str | None = None        # the recording machine's host name (Kineto metadata 'host_name')
    threads: int | None = None     # intra-op threads of the recording process, when it wrote them as metadata
    devices: int = 0               # entries of 'deviceProperties' (GPUs the profiler saw)
    gpu_names: tuple[str, ...] = ()  # distinct GPU names of 'deviceProperties' (of the devices kernels ran on)

    @property
    def device_kind(self) -> str:
        return "cuda" if len(self.kernels) else "cpu"


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def _int_or_none(value: Any) -> int | None:
    if _number(value):
        return int(value)
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


@dataclass(frozen=True)
class KinetoHeader:
    """What a Kineto trace's metadata says about its recording, read without its events: the host name, the
    intra-op threads (when written), the deviceProperties entries and their distinct GPU names."""

    host: str | None
    threads: int | None
    devices: int
    gpu_names: tuple[str, ...]
    device_ids: dict[int, str] = field(default_factory=dict)  # device id -> GPU name


def header_facts(doc: dict, where: str) -> KinetoHeader:
    """The recording facts of a Kineto document's top-level members (the whole document or
    :func:`read_header`'s); a bad thread count is refused naming the file."""
    cfg = schemas.config("kineto", doc.get("schemaVersion"), where)
    d, p = cfg["document"], cfg["device_properties"]
    host = doc.get(d["host"])
    threads = _int_or_none(doc.get(d["threads"]))
    if d["threads"] in doc and (threads is None or threads < 1):
        raise PmdbError(f"{where}: metadata '{d['threads']}' must be a thread count >= 1, "
                        f"found {doc[d['threads']]!r}")
    devices = doc.get(d["devices"])
    devices = devices if isinstance(devices, list) else []
    ids: dict[int, str] = {}
    names: list[str] = []
    for position, entry in enumerate(devices):
        name = entry.get(p["name"]) if isinstance(entry, dict) else None
        if isinstance(name, str) and name.strip():
            number = _int_or_none(entry.get(p["id"]))
            ids[position if number is None else number] = name.strip()
            names.append(name.strip())
    return KinetoHeader(host if isinstance(host, str) and host else None, threads, len(devices),
                        tuple(dict.fromkeys(names)), ids)


def read_header(path: str, where: str | None = None) -> KinetoHeader:
    """:func:`header_facts` of a Kineto file, read without parsing its events (fast on large traces)."""
    events = {str(cfg["document"]["events"]) for cfg in (schemas.config("kineto", v, str(path))
                                                        for v in schemas.known_versions("kineto"))}
    doc: dict = {}
    for key in sorted(events):
        doc = read_top_level(path, key)
        if key not in doc:
            break
    return header_facts(doc, where or str(path))


def parse_kineto(doc: dict, where: str) -> KinetoTrace:
    """Parse a Kineto JSON document (``where`` names the file in error messages)."""
    if "traceEvents" not in doc and "nodes" in doc:
        raise PmdbError(f"{where}: this is an execution trace (schema {doc.get('schema')!r}), "
                                f"not a Kineto trace: pass it as the ET file")
    cfg = schemas.config("kineto", doc.get("schemaVersion"), where)
    d, f, a = cfg["document"], cfg["event"], cfg["args"]
    events = doc.get(d["events"])
    if not isinstance(events, list):
        raise PmdbError(f"{where}: not a Kineto trace: no '{d['events']}' list")
    common = vocabulary()
    unit = float(cfg["time_unit_us"])
    cpu_rows: list[dict[str, Any]] = []
    dev_rows: list[dict[str, Any]] = []
    ignored: Counter[str] = Counter()
    for index, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise PmdbError(f"{where}: event #{index} is not a JSON object")
        if ev.get(f["phase"]) != cfg["complete_phase"]:
            continue
        category = ev.get(f["category"])
        cls = common.category_class(category)
        if cls is None:
            ignored[str(category)] += 1
            continue
        name, start, dur = ev.get(f["name"]), ev.get(f["start"]), ev.get(f["duration"])
        label = f"{where}: event #{index} ({name!r}, {category})"
        if not isinstance(name, str):
            raise PmdbError(f"{label} has no '{f['name']}' string")
        for key, value in ((f["start"], start), (f["duration"], dur)):
            if not _number(value):
                raise PmdbError(f"{label} lacks a numeric '{key}' (found {value!r})")
        if dur < 0:
            raise PmdbError(f"{label} has a negative '{f['duration']}' ({dur})")
        args = ev.get(f["args"]) or {}
        if not isinstance(args, dict):
            raise PmdbError(f"{label}: '{f['args']}' is not a JSON object")
        row = {"index": index, "name": name, "category": category, "cls": cls,
               "start_us": float(start) * unit, "dur_us": float(dur) * unit}
        if cls == "device":
            row.update(device=_int_or_none(args.get(a["device"], ev.get(f["process"]))),
                       stream=_int_or_none(args.get(a["stream"], ev.get(f["thread"]))),
                       correlation=_int_or_none(args.get(a["correlation"])))
            dev_rows.append(row)
            continue
        thread = _int_or_none(ev.get(f["thread"]))
        if thread is None:
            raise PmdbError(f"{label} has a non-integer '{f['thread']}' ({ev.get(f['thread'])!r})")
        row.update(thread=thread, process=_int_or_none(ev.get(f["process"])),
                   rf_id=_int_or_none(args.get(a["rf_id"])), input_shapes=args.get(a["input_dims"]),
                   attrs={key: args[raw] for key, raw in a.items()
                          if raw in args and key not in ("rf_id", "input_dims")})
        cpu_rows.append(row)
    if not cpu_rows:
        raise PmdbError(f"{where}: no CPU-side events (categories "
                                f"{', '.join(sorted(common.categories['op'] | common.categories['annotation']))})")
    ops = _ops_frame(cpu_rows, common)
    kernels = _kernels_frame(dev_rows, ops, common)
    iteration, iterations = kineto_iterations(ops)
    ops["iteration"] = iteration.astype("Int64")
    dist = doc.get(d["distributed"]) if isinstance(doc.get(d["distributed"]), dict) else {}
    head = header_facts(doc, where)
    ran_on = [head.device_ids.get(int(n)) for n in kernels["device"].dropna().unique()]
    gpus = tuple(dict.fromkeys(n for n in ran_on if n)) or head.gpu_names
    return KinetoTrace(str(cfg["version"]), ops.drop(columns=["index"]), kernels, iterations,
                       rank=_int_or_none(dist.get(cfg["distributed"]["rank"])),
                       world_size=_int_or_none(dist.get(cfg["distributed"]["world_size"])),
                       ignored=dict(ignored), host=head.host, threads=head.threads, devices=head.devices,
                       gpu_names=gpus)


def _ops_frame(rows: list[dict[str, Any]], common: Vocabulary) -> pd.DataFrame:
    """Op rows in start order (parents first on ties) with op_id, parent_id (nesting per thread)."""
    ops = pd.DataFrame(rows)
    ops["neg_dur"] = -ops["dur_us"]
    ops = ops.sort_values(["start_us", "neg_dur", "index"], kind="stable").drop(columns="neg_dur")
    ops = ops.reset_index(drop=True)
    ops.insert(0, "op_id", np.arange(len(ops), dtype=np.int64))
    parent = np.full(len(ops), -1, dtype=np.int64)
    stacks: dict[tuple, list[tuple[float, int]]] = {}
    for op_id, proc, tid, end in zip(ops["op_id"], ops["process"], ops["thread"], ops["start_us"] + ops["dur_us"]):
        stack = stacks.setdefault((proc, tid), [])
        while stack and stack[-1][0] + NEST_EPS_US < end:  # sorted by start: only the end decides containment
            stack.pop()
        if stack:
            parent[op_id] = stack[-1][1]
        stack.append((end, op_id))
    ops["parent_id"] = pd.array(np.where(parent < 0, None, parent), dtype="Int64")
    ops["is_collective"] = (ops["cls"] != "runtime") & ops["name"].str.contains(common.collective_ops)
    return ops


def _kernels_frame(rows: list[dict[str, Any]], ops: pd.DataFrame, common: Vocabulary) -> pd.DataFrame:
    """Device events in start order, with the launch call (same correlation id) and its innermost CPU op."""
    columns = ["kernel_index", "name", "category", "device", "stream", "correlation", "op_id", "launch_op_id",
               "launch_name", "launch_start_us", "launch_dur_us", "start_us", "dur_us", "is_collective"]
    if not rows:
        return pd.DataFrame(columns=columns)
    kernels = pd.DataFrame(rows).sort_values(["start_us", "index"], kind="stable").reset_index(drop=True)
    kernels["kernel_index"] = np.arange(len(kernels), dtype=np.int64)
    runtime = ops[ops["cls"] == "runtime"]
    corr = runtime["attrs"].map(lambda attrs: attrs.get("correlation"))
    launch_of = {int(c): op_id for c, op_id in zip(corr, runtime["op_id"]) if c is not None}
    parents = dict(zip(ops["op_id"], ops["parent_id"]))
    classes = dict(zip(ops["op_id"], ops["cls"]))
    launch_ids, owners = [], []
    for c in kernels["correlation"]:
        launch = launch_of.get(int(c)) if c is not None and not pd.isna(c) else None
        launch_ids.append(launch)
        owners.append(_innermost_op(launch, parents, classes) if launch is not None else None)
    kernels["launch_op_id"] = pd.array(launch_ids, dtype="Int64")
    kernels["op_id"] = pd.array(owners, dtype="Int64")
    launches = ops.set_index("op_id")
    has = kernels["launch_op_id"].notna()
    ids = kernels.loc[has, "launch_op_id"].astype(np.int64)
    kernels["launch_name"] = None
    kernels["launch_start_us"] = np.nan
    kernels["launch_dur_us"] = np.nan
    kernels.loc[has, "launch_name"] = launches.loc[ids, "name"].to_numpy()
    kernels.loc[has, "launch_start_us"] = launches.loc[ids, "start_us"].to_numpy()
    kernels.loc[has, "launch_dur_us"] = launches.loc[ids, "dur_us"].to_numpy()
    kernels["is_collective"] = kernels["name"].str.contains(common.collective_kernels)
    for col in ("device", "stream", "correlation"):
        kernels[col] = pd.array(kernels[col], dtype="Int64")
    return kernels[columns]


def _innermost_op(op_id: int, parents: dict, classes: dict) -> int | None:
    """The nearest ancestor of class 'op' (else the nearest annotation) of a launch call."""
    annotation = None
    current = parents.get(op_id)
    while current is not None and not pd.isna(current):
        if classes[current] == "op":
            return int(current)
        if annotation is None and classes[current] == "annotation":
            annotation = int(current)
        current = parents.get(current)
    return annotation
