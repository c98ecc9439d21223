"""Evicting one op's operands from every cache level: the cold cache state on any host.

Streaming a buffer through the caches evicts what was there only when the buffer is larger than the last-level cache:
64 MiB did on a 32 MiB-LLC AMD EPYC, but not on an Intel Xeon whose lscpu says 480 MiB of L3 (an 8 MiB buffer read
in 341 µs just touched, 363 µs after a 64 MiB stream, 526 after 128 MiB, ~610 after 512 MiB or 1 GiB, 549 after its
own lines were flushed; 2026-11-28), and a stream of twice such an LLC costs ~60 ms per cold repetition. Instead the
lines of the op's own operands are written back and dropped from L1, L2 and the LLC by the CPU's cache-line flush
(``cache_evict.c``: CLFLUSHOPT, CLFLUSH or DC CIVAC), which costs in proportion to the operands (8 MiB in 0.41 ms
with CLFLUSHOPT there, 5 ms with CLFLUSH), whatever the host's caches. The helper is compiled once per source and
machine with the system C compiler (``$CC`` or ``cc``) into ``$PMDB_CACHE_DIR`` (default ``~/.cache/pmdb``); where
that fails, :class:`collectors.ops.timer.CacheFlusher` falls back to streaming 2x the LLC and says so.

The operands are the CPU tensors reachable from what the timed callable holds (:func:`operand_ranges`): its
closure, bound objects, modules' parameters and buffers, and the saved tensors of the autograd graph a backward
runs, deduplicated by storage.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

SOURCE = Path(__file__).with_name("cache_evict.c")
METHODS = {1: "clflush", 2: "clflushopt", 3: "dc-civac"}
DEFAULT_LINE_BYTES = 64
_MAX_OBJECTS = 20_000  # objects visited per walk: a closure never needs more; a runaway graph stops here
_MAX_DEPTH = 12


@dataclass(frozen=True)
class Evictor:
    """The loaded helper: ``evict(ranges)`` drops every line of each ``(address, bytes)`` range from the caches."""

    method: str
    line_bytes: int
    _fn: Any

    def evict(self, ranges: Iterable[tuple[int, int]]) -> None:
        for address, nbytes in ranges:
            if nbytes > 0:
                self._fn(address, nbytes, self.line_bytes)


def cache_dir() -> Path:
    """Where the compiled helper is kept: ``$PMDB_CACHE_DIR``, else ``$XDG_CACHE_HOME/pmdb``, else ``~/.cache/pmdb``."""
    if os.environ.get("PMDB_CACHE_DIR"):
        return Path(os.environ["PMDB_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pmdb"


def line_bytes(root: str = "/sys/devices/system/cpu/cpu0/cache/index0/coherency_line_size") -> int:
    """The cache line size from sysfs (bytes; 64 where sysfs does not say)."""
    try:
        value = int(Path(root).read_text().strip())
    except (OSError, ValueError):
        return DEFAULT_LINE_BYTES
    return value if value > 0 and value & (value - 1) == 0 else DEFAULT_LINE_BYTES


def _compile(target: Path) -> None:
    """Build the helper into ``target`` atomically (a half-written library is never loaded)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        compiler = os.environ.get("CC") or "cc"
        done = subprocess.run([compiler, "-O2", "-shared", "-fPIC", "-o", tmp, str(SOURCE)],
                              capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise OSError(f"{compiler} failed: {(done.stderr or done.stdout).strip().splitlines()[:1]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


@functools.lru_cache(maxsize=1)
def load() -> Evictor | None:
    """The helper for this machine, compiled on first use; None where it cannot be built or loaded (no C compiler,
    an architecture without a user-level flush): the caller then streams instead (:func:`why_unavailable`)."""
    try:
        digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
        target = cache_dir() / f"cache_evict-{digest}-{platform.machine()}.so"
        if not target.exists():
            _compile(target)
        lib = ctypes.CDLL(str(target))
        lib.pmdb_evict.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
        lib.pmdb_evict.restype = None
        lib.pmdb_evict_method.restype = ctypes.c_int
        method = METHODS.get(lib.pmdb_evict_method())
    except (OSError, subprocess.SubprocessError, AttributeError) as exc:
        _failure.append(f"{type(exc).__name__}: {exc}")
        return None
    if method is None:
        _failure.append("unknown eviction method")
        return None
    return Evictor(method, line_bytes(), lib.pmdb_evict)


_failure: list[str] = []


def why_unavailable() -> str | None:
    """Why :func:`load` gave None (None when it did not)."""
    return _failure[-1] if _failure else None


def _storage_range(tensor: torch.Tensor) -> tuple[int, int] | None:
    if tensor.device.type != "cpu" or tensor.is_sparse or tensor.layout != torch.strided:
        return None
    try:
        storage = tensor.untyped_storage()
        return storage.data_ptr(), storage.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def _children(obj: Any) -> Iterable[Any]:
    """What an object holds that may hold operands (see the module docstring)."""
    if isinstance(obj, torch.Tensor):
        if obj.is_leaf:
            yield obj.grad
        yield obj.grad_fn
        return
    if isinstance(obj, torch.nn.Module):
        yield from obj.parameters(recurse=True)
        yield from obj.buffers(recurse=True)
        yield from vars(obj).values()
        return
    if isinstance(obj, dict):
        yield from obj.values()
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        yield from obj
        return
    if isinstance(obj, functools.partial):
        yield obj.func
        yield from obj.args
        yield from obj.keywords.values()
        return
    if callable(obj) and hasattr(obj, "__code__"):  # a Python function: its closure and defaults
        for cell in obj.__closure__ or ():
            try:
                yield cell.cell_contents
            except ValueError:  # an empty cell
                continue
        yield from obj.__defaults__ or ()
        return
    if hasattr(obj, "__self__") and hasattr(obj, "__func__"):  # a bound method
        yield obj.__self__
        yield obj.__func__
        return
    if isinstance(obj, torch.autograd.graph.Node):  # an autograd node (torch's generated ones are 'builtins' types)
        for name in dir(obj):
            if name.startswith("_saved_"):
                try:
                    yield getattr(obj, name)
                except (RuntimeError, AttributeError):  # freed after a backward without retain_graph
                    continue
        if hasattr(obj, "variable"):
            yield obj.variable
        for nxt, _ in obj.next_functions:
            yield nxt
        return
    if hasattr(obj, "__dict__") and not isinstance(obj, type) and type(obj).__module__.split(".")[0] in (
            "collectors", "fitters", "fbgemm_gpu", "torch"):
        yield from vars(obj).values()


def _add_storage(ranges: dict[int, int], tensor: torch.Tensor) -> None:
    """Record the tensor's CPU storage in ``ranges`` (address -> bytes, the largest seen at an address)."""
    found = _storage_range(tensor)
    if found is not None and found[1] > ranges.get(found[0], 0):
        ranges[found[0]] = found[1]


def storage_ranges(tensors: Iterable[torch.Tensor]) -> list[tuple[int, int]]:
    """``(address, bytes)`` of the CPU storages of exactly these tensors, each storage once (nothing reached
    through them, where :func:`operand_ranges` walks what its roots hold)."""
    ranges: dict[int, int] = {}
    for tensor in tensors:
        _add_storage(ranges, tensor)
    return sorted(ranges.items())


def operand_ranges(*roots: Any) -> list[tuple[int, int]]:
    """``(address, bytes)`` of every CPU tensor storage reachable from ``roots``, each storage once."""
    ranges: dict[int, int] = {}
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(root, 0) for root in roots]
    while stack and len(seen) < _MAX_OBJECTS:
        obj, depth = stack.pop()
        if obj is None or isinstance(obj, (str, bytes, int, float, bool, type)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            _add_storage(ranges, obj)
        if depth < _MAX_DEPTH:
            stack.extend((child, depth + 1) for child in _children(obj))
    return sorted(ranges.items())
