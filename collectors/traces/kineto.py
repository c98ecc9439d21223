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
from pmdb.traces.gc_pause import collector_paused
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
    # JSON numbers are int or float: checked by type first (an ABC isinstance costs more than the rest of an event)
    return type(value) in _PLAIN_NUMBERS or (isinstance(value, Real) and not isinstance(value, bool))


_PLAIN_NUMBERS = (int, float)


def _int_or_none(value: Any) -> int | None:
    if type(value) is int:
        return value
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
    d = cfg["document"]
    events = doc.get(d["events"])
    if not isinstance(events, list):
        raise PmdbError(f"{where}: not a Kineto trace: no '{d['events']}' list")
    common = vocabulary()
    with collector_paused():   # 10^5 rows of acyclic containers
        cpu_rows, dev_rows, ignored = _event_rows(events, cfg, common, where)
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


def _event_rows(events: list, cfg: dict, common: Vocabulary,
                where: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Counter[str]]:
    """The complete events of classed categories as CPU-side and device rows, and the count of events left out per
    category."""
    f, a = cfg["event"], cfg["args"]
    unit = float(cfg["time_unit_us"])
    phase_key, complete, category_key = f["phase"], cfg["complete_phase"], f["category"]
    name_key, start_key, dur_key, args_key = f["name"], f["start"], f["duration"], f["args"]
    thread_key, process_key = f["thread"], f["process"]
    rf_key, dims_key = a["rf_id"], a["input_dims"]
    attr_keys = [(key, raw) for key, raw in a.items() if key not in ("rf_id", "input_dims")]
    classes: dict[Any, str | None] = {}
    cpu_rows: list[dict[str, Any]] = []
    dev_rows: list[dict[str, Any]] = []
    ignored: Counter[str] = Counter()
    for index, ev in enumerate(events):
        if not isinstance(ev, dict):
            raise PmdbError(f"{where}: event #{index} is not a JSON object")
        if ev.get(phase_key) != complete:
            continue
        category = ev.get(category_key)
        try:
            cls = classes[category]
        except KeyError:
            cls = classes[category] = common.category_class(category)
        if cls is None:
            ignored[str(category)] += 1
            continue
        name, start, dur = ev.get(name_key), ev.get(start_key), ev.get(dur_key)
        if not isinstance(name, str):
            raise PmdbError(f"{_label(where, index, name, category)} has no '{name_key}' string")
        for key, value in ((start_key, start), (dur_key, dur)):
            if not _number(value):
                raise PmdbError(f"{_label(where, index, name, category)} lacks a numeric '{key}' (found {value!r})")
        if dur < 0:
            raise PmdbError(f"{_label(where, index, name, category)} has a negative '{dur_key}' ({dur})")
        args = ev.get(args_key) or {}
        if not isinstance(args, dict):
            raise PmdbError(f"{_label(where, index, name, category)}: '{args_key}' is not a JSON object")
        row = {"index": index, "name": name, "category": category, "cls": cls,
               "start_us": float(start) * unit, "dur_us": float(dur) * unit}
        if cls == "device":
            row.update(device=_int_or_none(args.get(a["device"], ev.get(process_key))),
                       stream=_int_or_none(args.get(a["stream"], ev.get(thread_key))),
                       correlation=_int_or_none(args.get(a["correlation"])))
            dev_rows.append(row)
            continue
        thread = _int_or_none(ev.get(thread_key))
        if thread is None:
            raise PmdbError(f"{_label(where, index, name, category)} has a non-integer '{thread_key}' "
                            f"({ev.get(thread_key)!r})")
        row.update(thread=thread, process=_int_or_none(ev.get(process_key)),
                   rf_id=_int_or_none(args.get(rf_key)), input_shapes=args.get(dims_key),
                   attrs={key: args[raw] for key, raw in attr_keys if raw in args})
        cpu_rows.append(row)
    return cpu_rows, dev_rows, ignored


def _label(where: str, index: int, name: Any, category: Any) -> str:
    """An event as error messages name it."""
    return f"{where}: event #{index} ({name!r}, {category})"


def _ops_frame(rows: list[dict[str, Any]], common: Vocabulary) -> pd.DataFrame:
    """Op rows in start order (parents first on ties) with op_id, parent_id (nesting per thread)."""
    ops = pd.DataFrame(rows)
    ops["neg_dur"] = -ops["dur_us"]
    ops = ops.sort_values(["start_us", "neg_dur", "index"], kind="stable").drop(columns="neg_dur")
    ops = ops.reset_index(drop=True)
    ops.insert(0, "op_id", np.arange(len(ops), dtype=np.int64))
    parent = np.full(len(ops), -1, dtype=np.int64)
    stacks: dict[tuple, list[tuple[float, int]]] = {}
    for op_id, proc, tid, end in zip(ops["op_id"].tolist(), ops["process"].tolist(), ops["thread"].tolist(),
                                     (ops["start_us"] + ops["dur_us"]).tolist()):
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
