"""Platform detection and the platform registry (the ``platforms`` table).

A platform is what measurements are tagged with: this machine (detected, with a stable fingerprint) or a named
remote machine whose data was imported.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform as pyplatform
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from enum import StrEnum
from typing import Any

from pmdb.errors import PmdbError
from pmdb.store import Store

_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class DeviceKind(StrEnum):
    """What runs an op: the host CPU, or a CUDA device."""

    CPU = "cpu"
    CUDA = "cuda"


class Semantics(StrEnum):
    """How a rank executes ops (the simulator's rules for each are in ``simulator.semantics``)."""

    SYNC_HOST = "sync_host"        # CPU: ops run on the calling thread, collectives on a communication thread
    ASYNC_DEVICE = "async_device"  # CUDA: the CPU launches kernels onto compute and communication streams


@dataclass(frozen=True)
class GpuSpecs:
    """A platform's GPU as registered (detected, from a trace's deviceProperties, or from a spec sheet)."""

    name: str | None
    count: int | None
    memory_bytes: int | None


@dataclass(frozen=True)
class Platform:
    """One row of ``platforms`` as the stages use it: identity, execution semantics, host and GPU facts."""

    name: str
    device_kind: DeviceKind
    semantics: Semantics
    cpu_model: str | None
    cpu_cores: int | None          # logical CPUs usable by the process that registered it
    threads: int | None            # torch intra-op threads when registered
    memory_bytes: int | None       # host memory, bytes
    is_imported: bool              # named for data recorded elsewhere, not detected here
    gpu: GpuSpecs | None
    row: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)  # every column, as stored

    @property
    def sync_host(self) -> bool:
        return self.semantics is Semantics.SYNC_HOST

    @property
    def cuda(self) -> bool:
        return self.device_kind is DeviceKind.CUDA

    @property
    def cache_bytes(self) -> tuple[int | None, int | None]:
        """(L2 per core, last-level cache) bytes as detected at registration (None where unknown)."""
        details = self.row.get("details")
        if isinstance(details, str):
            try:
                details = json.loads(details)
            except ValueError:
                details = None
        details = details if isinstance(details, dict) else {}
        return _int(details.get("l2_bytes")), _int(details.get("llc_bytes"))


def _int(value: Any) -> int | None:
    try:
        return None if value is None or value != value else int(value)
    except (TypeError, ValueError):
        return None


def _record(row: dict[str, Any]) -> Platform:
    gpu = None
    if row.get("gpu_name") is not None and row.get("gpu_name") == row.get("gpu_name"):
        gpu = GpuSpecs(str(row["gpu_name"]), _int(row.get("gpu_count")), _int(row.get("gpu_memory_bytes")))
    return Platform(name=str(row["name"]), device_kind=DeviceKind(row["device_kind"]),
                    semantics=Semantics(row["semantics"]), cpu_model=row.get("cpu_model"),
                    cpu_cores=_int(row.get("cpu_cores")), threads=_int(row.get("threads")),
                    memory_bytes=_int(row.get("memory_bytes")), is_imported=bool(row.get("is_imported")), gpu=gpu,
                    row=dict(row))


def known_names(store: Store) -> list[str]:
    """Every registered platform name, sorted."""
    return [r[0] for r in store.conn.execute("SELECT name FROM platforms ORDER BY name").fetchall()]


REGISTER_HINT = "register one with `pmdb platform --name NAME`"
CREATE_FLAG = "--create-platform"  # the flag of a command that may create the platform it names
_SHOWN_NAMES = 6  # known names an UnknownPlatform message lists before "and N more"


def create_hint(flag: str = CREATE_FLAG) -> str:
    """The hint of a command that may create the platform when given ``flag``."""
    return f"{REGISTER_HINT}, or pass {flag} to create it"


class UnknownPlatform(PmdbError):
    """A platform name that is not registered: one line, the same everywhere,
    "unknown platform 'x' (known: a, b; <hint>)"."""

    def __init__(self, name: str, known: list[str], hint: str = REGISTER_HINT):
        shown = ", ".join(known[:_SHOWN_NAMES]) or "none"
        if len(known) > _SHOWN_NAMES:
            shown += f" and {len(known) - _SHOWN_NAMES} more"
        super().__init__(f"unknown platform {name!r} (known: {shown}; {hint})")
        self.name = name


def find(store: Store, name: str) -> Platform | None:
    """The registered platform called ``name``; None when there is none."""
    frame = store.query("SELECT * FROM platforms WHERE name = ?", [name])
    return None if frame.empty else _record(frame.iloc[0].to_dict())


def load(store: Store, name: str, *, hint: str = REGISTER_HINT) -> Platform:
    """The registered platform called ``name``; :class:`UnknownPlatform` (ending in ``hint``) when there is none.
    The one way stages read a platform."""
    found = find(store, name)
    if found is None:
        raise UnknownPlatform(name, known_names(store), hint)
    return found


def check_known(store: Store, name: str, *, new: bool = False, flag: str = CREATE_FLAG) -> Platform | None:
    """The registered platform ``name``; None when it is missing and ``new`` (the user passed ``flag``) lets the
    caller create it; :class:`UnknownPlatform` naming ``flag`` otherwise. Nothing is written: call it before a run
    row or a platform row is created."""
    check_name(name)
    found = find(store, name)
    if found is None and not new:
        raise UnknownPlatform(name, known_names(store), create_hint(flag))
    return found


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return pyplatform.processor() or pyplatform.machine() or "unknown-cpu"


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _slug(text: str) -> str:
    text = re.sub(r"\(r\)|\(tm\)|cpu|processor|@.*$|\d+-core", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:40] or "unknown"


def _nvidia_smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


_SIZE_UNITS = {"K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30}


def cache_sizes(root: str = "/sys/devices/system/cpu/cpu0/cache") -> dict[str, int]:
    """{'l2_bytes', 'llc_bytes'} of CPU 0's data/unified caches from sysfs (L2 per core, the highest level's size
    per instance); keys are absent where sysfs does not say."""
    levels: dict[int, int] = {}
    base = Path(root)
    for index in sorted(base.glob("index*")) if base.is_dir() else []:
        try:
            kind = (index / "type").read_text().strip()
            level = int((index / "level").read_text().strip())
            text = (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or not text:
            continue
        unit = _SIZE_UNITS.get(text[-1].upper(), 1)
        try:
            size = int(text[:-1] if text[-1].upper() in _SIZE_UNITS else text) * unit
        except ValueError:
            continue
        levels[level] = max(levels.get(level, 0), size)
    out = {}
    if 2 in levels:
        out["l2_bytes"] = levels[2]
    if levels and max(levels) >= 2:
        out["llc_bytes"] = levels[max(levels)]
    return out


def detect() -> dict[str, Any]:
    """Facts about this machine, as a ``platforms`` row without its name."""
    import torch

    try:
        import fbgemm_gpu  # noqa: F401  (registers the ops; its version is what matters)
        from importlib.metadata import version, PackageNotFoundError
        fbgemm_version = None
        for dist in ("fbgemm-gpu-cpu", "fbgemm-gpu"):
            try:
                fbgemm_version = version(dist)
                break
            except PackageNotFoundError:
                continue
    except Exception:  # fbgemm missing or failing to load: recorded as absent
        fbgemm_version = None

    cuda = torch.cuda.is_available()
    row: dict[str, Any] = {
        "device_kind": (DeviceKind.CUDA if cuda else DeviceKind.CPU).value,
        "semantics": (Semantics.ASYNC_DEVICE if cuda else Semantics.SYNC_HOST).value,
        "cpu_model": _cpu_model(),
        "cpu_cores": _usable_cores(),
        "threads": torch.get_num_threads(),
        "memory_bytes": _memory_bytes(),
        "gpu_name": None, "gpu_count": None, "gpu_memory_bytes": None,
        "driver_version": None, "cuda_version": torch.version.cuda, "interconnect": None,
        "torch_version": torch.__version__,
        "fbgemm_version": fbgemm_version,
        "hostname": socket.gethostname(),
        "details": {"python": pyplatform.python_version(), "system": pyplatform.platform(),
                    "machine": pyplatform.machine(), **cache_sizes()},
    }
    if cuda:
        props = torch.cuda.get_device_properties(0)
        row.update(gpu_name=props.name, gpu_count=torch.cuda.device_count(), gpu_memory_bytes=props.total_memory)
        driver = _nvidia_smi("--query-gpu=driver_version", "--format=csv,noheader")
        row["driver_version"] = driver.splitlines()[0] if driver else None
        row["interconnect"] = _nvidia_smi("topo", "-m")
    return row


def fingerprint(row: dict[str, Any]) -> str:
    """Stable identity of the hardware (not of versions or thread settings)."""
    memory_gib = round((row.get("memory_bytes") or 0) / 2**30)
    key = [row["device_kind"], row["cpu_model"], row["cpu_cores"], memory_gib,
           row.get("gpu_name"), row.get("gpu_count")]
    return hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]


def default_name(row: dict[str, Any]) -> str:
    if row["device_kind"] == "cuda":
        return f"cuda-{_slug(row['gpu_name'] or 'gpu')}-x{row['gpu_count']}"
    return f"cpu-{_slug(row['cpu_model'])}-{row['cpu_cores']}c"


def check_name(name: str) -> str:
    if not _NAME_OK.match(name):
        raise PmdbError(f"bad platform name {name!r}: use letters, digits, '.', '_' or '-' (at most 100)")
    return name


def register_local(store: Store, name: str | None = None) -> dict[str, Any]:
    """Detect this machine and insert or refresh its row. Returns the row (with ``name``)."""
    row = detect()
    row["fingerprint"] = fingerprint(row)
    if name is None:
        existing = store.scalar("SELECT name FROM platforms WHERE fingerprint = ? AND NOT is_imported "
                                "ORDER BY registered_at LIMIT 1", [row["fingerprint"]])
        name = existing or default_name(row)
    row["name"] = check_name(name)
    other = store.conn.execute("SELECT fingerprint, is_imported FROM platforms WHERE name = ?", [name]).fetchone()
    if other is not None and (other[1] or other[0] != row["fingerprint"]):
        what = "imported data" if other[1] else f"fingerprint {other[0]}"
        raise PmdbError(f"platform name {name!r} already belongs to another machine ({what}); "
                        f"choose another --platform name")
    if other is not None:
        updates = {k: v for k, v in row.items() if k != "name"}
        sets = ", ".join(f"{k} = ?" for k in updates)
        store.conn.execute(f"UPDATE platforms SET {sets} WHERE name = ?",
                           [json.dumps(v) if k == "details" else v for k, v in updates.items()] + [name])
    else:
        store.insert_one("platforms", row)
    return row


def ensure_named(store: Store, name: str, *, device_kind: str = "cuda", topology: str | None = None,
                 details: dict[str, Any] | None = None, create: bool = True, flag: str = CREATE_FLAG) -> str:
    """A platform for imported data recorded on another machine. A missing one is created only when ``create``
    (importers; a collect command given ``flag``), else :class:`UnknownPlatform`. Call it in the transaction that
    writes the platform's rows, after every input was checked, so that a refused input leaves no platform
    behind. Returns its name."""
    check_name(name)
    if device_kind not in tuple(DeviceKind):
        raise PmdbError(f"bad device kind {device_kind!r}: use cpu or cuda")
    if check_known(store, name, new=create, flag=flag) is not None:
        if topology:
            store.conn.execute("UPDATE platforms SET interconnect = ? WHERE name = ?", [topology, name])
        return name
    store.insert_one("platforms", {
        "name": name, "device_kind": device_kind,
        "semantics": Semantics.ASYNC_DEVICE.value if device_kind == "cuda" else Semantics.SYNC_HOST.value,
        "interconnect": topology, "is_imported": True, "details": details or {}})
    return name


def resolve(store: Store, name: str | None) -> str:
    """The platform to use: the named one (must exist: :class:`UnknownPlatform` otherwise, never created), else
    this machine (registered on first use)."""
    if name is None:
        return register_local(store)["name"]
    return load(store, name).name


def local(store: Store, name: str | None = None, *, new: bool = False, flag: str = CREATE_FLAG) -> str:
    """This machine's platform for a command that measures here: None -> detected (registered on first use); a
    registered name -> refreshed (it must be this machine); an unknown name -> registered as this machine only
    when ``new`` (the user passed ``flag``), else :class:`UnknownPlatform`. Returns its name."""
    if name is not None:
        check_known(store, name, new=new, flag=flag)
    return register_local(store, name)["name"]


def describe(store: Store, name: str) -> dict[str, Any]:
    """Every stored column of a platform."""
    return dict(load(store, name).row)
