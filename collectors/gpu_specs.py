"""GPU spec sheets: a platform that is not this machine, known from a device-config JSON (NeuSight's
``device_configs/*.json`` or pmdb's own field names) or from a Kineto trace's ``deviceProperties``.

Sheet fields are found by name (case and '-'/'_' ignored), with their units:

| pmdb field      | accepted names                         | unit in the file |
|-----------------|----------------------------------------|------------------|
| device          | Device, name, gpu_name                  | text             |
| fp32_flops      | SingleFLOPs, fp32_gflops                | GFLOP/s          |
| mem_bw          | Mem_Bw, mem_bw_gbps                     | GB/s (1e9 B/s)   |
| sm_count        | Num_Sm, sm_count, numSms                | count            |
| cores_per_sm    | Core_Per_SM, cores_per_sm               | count            |
| clock_mhz       | Freq, clock_mhz                         | MHz              |
| l2_bytes        | L2Cache, l2_mb                          | MB (2^20 B)      |
| memory_bytes    | Dev_Mem, memory_gb                      | GB (2^30 B)      |

``device``, ``fp32_flops`` and ``mem_bw`` are required of a sheet; a trace's deviceProperties give only the device
name, SM count and memory (no clock or FP32 rate), so such a platform has no roofline until a sheet is registered.
Stored in ``gpu_specs`` (migration 0003) with the platform row (device kind ``cuda``, semantics ``async_device``).
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.jsonfile import parse_object
from pmdb.platform import Platform
from pmdb.store import Store
from pmdb.userfiles import read_bytes

# pmdb field -> (accepted names, normalised; factor from the file's unit to pmdb's)
_FIELDS: dict[str, tuple[tuple[str, ...], float]] = {
    "fp32_flops": (("singleflops", "fp32gflops"), 1e9),
    "mem_bw": (("membw", "membwgbps"), 1e9),
    "sm_count": (("numsm", "smcount", "numsms"), 1.0),
    "cores_per_sm": (("corepersm", "corespersm"), 1.0),
    "clock_mhz": (("freq", "clockmhz"), 1.0),
    "l2_bytes": (("l2cache", "l2mb"), 2.0 ** 20),
    "memory_bytes": (("devmem", "memorygb"), 2.0 ** 30),
}
_DEVICE_NAMES = ("device", "name", "gpuname")
_REQUIRED = {"fp32_flops": "SingleFLOPs (FP32 peak, GFLOP/s)", "mem_bw": "Mem_Bw (memory bandwidth, GB/s)"}
_INTEGRAL = {"sm_count", "cores_per_sm", "l2_bytes", "memory_bytes"}
SPEC_COLUMNS = ("device", "fp32_flops", "mem_bw", "sm_count", "cores_per_sm", "clock_mhz", "l2_bytes", "memory_bytes")


@dataclass(frozen=True)
class GpuSheet:
    """One GPU's nominal figures (FLOP/s, bytes/s, counts, MHz, bytes); None where the source does not say."""

    device: str
    fp32_flops: float | None
    mem_bw: float | None
    sm_count: int | None = None
    cores_per_sm: int | None = None
    clock_mhz: float | None = None
    l2_bytes: int | None = None
    memory_bytes: int | None = None

    def features(self) -> dict[str, float]:
        """The numbers the cross-GPU models use (missing ones as NaN)."""
        return {k: float("nan") if v is None else float(v) for k, v in asdict(self).items() if k != "device"}


def _key(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def slug(device: str) -> str:
    """A platform name from a device name: 'Tesla V100-PCIE-32GB' -> 'tesla-v100-pcie-32gb'."""
    return re.sub(r"[^a-z0-9]+", "-", device.lower()).strip("-")[:100] or "gpu"


def _number(path: Path, field: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not math.isfinite(raw) or raw <= 0:
        raise PmdbError(f"{path}: {field} is {raw!r}, not a positive number")
    return float(raw)


def _positive(raw: Any) -> bool:
    """A finite positive JSON number (JSON allows NaN and Infinity)."""
    return not isinstance(raw, bool) and isinstance(raw, (int, float)) and math.isfinite(raw) and raw > 0


def sheet_from_mapping(path: Path, data: dict[str, Any]) -> GpuSheet:
    """A sheet from a parsed JSON object (fields by name, see the module docstring)."""
    by_key = {_key(k): (k, v) for k, v in data.items()}
    device = next((by_key[n][1] for n in _DEVICE_NAMES if n in by_key), None)
    if not isinstance(device, str) or not device.strip():
        raise PmdbError(f"{path}: no device name (a 'Device' field)")
    values: dict[str, Any] = {}
    for field, (names, factor) in _FIELDS.items():
        found = next((by_key[n] for n in names if n in by_key), None)
        if found is None:
            values[field] = None
            continue
        number = _number(path, found[0], found[1]) * factor
        values[field] = int(round(number)) if field in _INTEGRAL else number
    missing = [_REQUIRED[f] for f in _REQUIRED if values[f] is None]
    if missing:
        raise PmdbError(f"{path}: the spec sheet lacks {' and '.join(missing)}")
    return GpuSheet(device=device.strip(), **values)


def read_sheet(path: Path) -> tuple[GpuSheet, dict[str, Any], str]:
    """(sheet, the JSON as read, sha256 of the file) of a device-config JSON file."""
    path = Path(path)
    if not path.is_file():
        raise PmdbError(f"no such file: {path}")
    raw = read_bytes(path)
    data = parse_object(path, raw, not_json="not a JSON spec sheet", what="a spec sheet")
    return sheet_from_mapping(path, data), data, hashlib.sha256(raw).hexdigest()


def sheet_from_trace(path: Path) -> tuple[GpuSheet, dict[str, Any], str]:
    """(sheet, deviceProperties entry, sha256) from a Kineto trace (JSON, optionally gzipped): the first device's
    name, SM count and memory. No FP32 rate or bandwidth: traces do not record them."""
    path = Path(path)
    if not path.is_file():
        raise PmdbError(f"no such file: {path}")
    raw = read_bytes(path)
    try:
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        trace = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PmdbError(f"{path}: not a Kineto trace JSON ({str(exc).splitlines()[0]})") from None
    props = trace.get("deviceProperties") if isinstance(trace, dict) else None
    if not props or not isinstance(props, list) or not isinstance(props[0], dict):
        raise PmdbError(f"{path}: the trace has no deviceProperties")
    first = props[0]
    name = first.get("name")
    if not isinstance(name, str) or not name:
        raise PmdbError(f"{path}: deviceProperties[0] has no name")
    sms, memory = first.get("numSms"), first.get("totalGlobalMem")
    return GpuSheet(device=name, fp32_flops=None, mem_bw=None,
                    sm_count=int(sms) if _positive(sms) else None,
                    memory_bytes=int(memory) if _positive(memory) else None), \
        first, hashlib.sha256(raw).hexdigest()


def check_target(store: Store, name: str) -> Platform | None:
    """The platform a sheet may go to: an imported cuda platform or a new name (returned: the existing one)."""
    platforms.check_name(name)
    existing = platforms.find(store, name)
    if existing is not None and not existing.is_imported:
        raise PmdbError(f"platform {name!r} is this machine (detected); spec sheets describe other GPUs: "
                        f"choose another --name")
    if existing is not None and not existing.cuda:
        raise PmdbError(f"platform {name!r} is a CPU platform; a GPU spec sheet needs a cuda platform")
    return existing


@dataclass(frozen=True)
class SheetSource:
    """A sheet to register with where it came from: ``source`` 'spec-sheet' or 'trace-device-properties'."""

    sheet: GpuSheet
    name: str | None = None
    source: str = "spec-sheet"
    source_file: str | None = None
    sha256: str | None = None
    details: dict[str, Any] | None = None


def _store_sheet(store: Store, item: SheetSource) -> str:
    """Insert or update one platform's specs (the caller holds the transaction). A trace's partial specs fill only
    what a stored sheet lacks."""
    sheet = item.sheet
    name = item.name or slug(sheet.device)
    existing = check_target(store, name)
    if existing is None:
        store.insert_one("platforms", {
            "name": name, "device_kind": "cuda", "semantics": platforms.Semantics.ASYNC_DEVICE.value,
            "gpu_name": sheet.device, "gpu_count": 1, "gpu_memory_bytes": sheet.memory_bytes,
            "is_imported": True, "details": {"specs_from": item.source}})
    else:
        store.conn.execute("UPDATE platforms SET gpu_name = coalesce(gpu_name, ?), gpu_count = coalesce(gpu_count, 1), "
                           "gpu_memory_bytes = coalesce(gpu_memory_bytes, ?) WHERE name = ?",
                           [sheet.device, sheet.memory_bytes, name])
    old = load(store, name)
    if old is not None and old.fp32_flops is not None and sheet.fp32_flops is None:
        fill = {k: v for k, v in asdict(sheet).items() if v is not None and getattr(old, k) is None}
        for key, value in fill.items():
            store.conn.execute(f"UPDATE gpu_specs SET {key} = ? WHERE platform = ?", [value, name])
        return name
    store.conn.execute("DELETE FROM gpu_specs WHERE platform = ?", [name])
    store.insert_one("gpu_specs", {**asdict(sheet), "platform": name, "source": item.source,
                                   "source_file": item.source_file, "source_sha256": item.sha256,
                                   "details": item.details or {}})
    return name


def register_all(store: Store, items: list[SheetSource]) -> list[str]:
    """Register several sheets in ONE transaction (all or none); a sheet replaces a platform's earlier specs, a
    trace's partial specs never replace a sheet's figures. Returns the platform names."""
    for item in items:  # every target is checked before anything is written
        check_target(store, item.name or slug(item.sheet.device))
    with store.transaction():
        return [_store_sheet(store, item) for item in items]


def register(store: Store, sheet: GpuSheet, name: str | None = None, *, source: str = "spec-sheet",
             source_file: str | None = None, sha256: str | None = None,
             details: dict[str, Any] | None = None) -> str:
    """Create (or attach to) the named imported CUDA platform and store its specs (see ``register_all``). Returns
    the platform name."""
    return register_all(store, [SheetSource(sheet, name, source, source_file, sha256, details)])[0]


def load(store: Store, platform: str) -> GpuSheet | None:
    """The stored specs of a platform; None when it has none."""
    frame = store.query(f"SELECT {', '.join(SPEC_COLUMNS)} FROM gpu_specs WHERE platform = ?", [platform])
    if frame.empty:
        return None
    row = frame.iloc[0].to_dict()
    clean = {k: (None if v is None or (isinstance(v, float) and v != v) else v) for k, v in row.items()}
    for key in _INTEGRAL:
        clean[key] = None if clean[key] is None else int(clean[key])
    return GpuSheet(**clean)


def all_specs(store: Store) -> pd.DataFrame:
    """Every platform with specs: platform plus the spec columns (FLOP/s, bytes/s, counts, MHz, bytes)."""
    return store.query(f"SELECT platform, {', '.join(SPEC_COLUMNS)}, source FROM gpu_specs ORDER BY platform")


def peaks(store: Store, platform: str) -> dict[str, float]:
    """Nominal roofline peaks from the platform's specs: {'gemm_flops': FLOP/s, 'mem_bw': bytes/s} (what is known)."""
    sheet = load(store, platform)
    if sheet is None:
        return {}
    out = {"gemm_flops": sheet.fp32_flops, "mem_bw": sheet.mem_bw}
    return {k: float(v) for k, v in out.items() if v}


def _shown(value: Any, digits: int = 0) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and value != value):
        return "-"
    number = round(float(value), digits)
    return f"{number:.{digits}f}" if digits and not number.is_integer() else str(int(round(number)))


LISTING_COLUMNS = ("name", "kind", "device", "TFLOP/s", "GB/s", "SMs", "MHz", "L2MiB", "GiB")


def listing(store: Store) -> pd.DataFrame:
    """Every platform with its specs where it has them, as display text for an 80-column table: FP32 TFLOP/s,
    memory GB/s, SMs, clock MHz, L2 MiB, device memory GiB ('-' where unknown; device names cut at 22 characters).
    ``pmdb sql "SELECT * FROM gpu_specs"`` has every stored figure."""
    frame = store.query(
        "SELECT p.name, p.device_kind AS kind, coalesce(s.device, p.gpu_name, p.cpu_model) AS device, "
        "s.fp32_flops / 1e12 AS tflops, s.mem_bw / 1e9 AS gbps, s.sm_count AS sms, s.clock_mhz AS mhz, "
        "s.l2_bytes / 2^20 AS l2, coalesce(s.memory_bytes, p.gpu_memory_bytes) / 2^30 AS gib "
        "FROM platforms p LEFT JOIN gpu_specs s ON s.platform = p.name ORDER BY p.name")
    rows = [[name, kind, "-" if device is None or device != device else
             (str(device) if len(str(device)) <= 22 else str(device)[:21] + "~"),
             _shown(tflops, 2), _shown(gbps), _shown(sms), _shown(mhz), _shown(l2, 1), _shown(gib)]
            for name, kind, device, tflops, gbps, sms, mhz, l2, gib in frame.itertuples(index=False)]
    return pd.DataFrame(rows, columns=list(LISTING_COLUMNS), dtype=object)
