"""glibc malloc settings every timed process runs under (ground truth, traces and microbenchmarks alike).

With default glibc malloc, large buffers freed every iteration (gradients after ``zero_grad``) go back to the OS and
are page-faulted in again on the next iteration (+7-12 ms per 35 ms iteration and 100-189 ms spikes measured here,
environment.md). Keeping them in the heap removes that: the mmap threshold is fixed at 32 MiB (the largest value glibc
accepts on 64-bit), the heap is never trimmed below 16 GiB, and mmap is off for the main arena (``MALLOC_MMAP_MAX_=0``):
a block over 32 MiB (a transformer's 31-51 MB vocabulary tensors and their optimizer temporaries) would otherwise be
mapped fresh and faulted in on every call, which made gpt2 (hidden 256) steps ~1.5x slower and their cost depend on
which allocations of an iteration happened to get fresh pages (profiled and unprofiled iterations differed by ~20%).
Threads' own arenas still map what their heaps cannot hold. A user's own MALLOC_* environment wins. glibc reads these
variables at process start, so they apply to the processes pmdb starts (the ranks' fork server), not to the
already-running parent; what a rank's environment holds is what gets recorded.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any, Mapping

DEFAULTS = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(16 * 2**30),
            "MALLOC_MMAP_MAX_": "0"}
RECORDED = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_TOP_PAD_",
            "MALLOC_ARENA_MAX", "GLIBC_TUNABLES", "LD_PRELOAD")


def allocator_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The MALLOC_* variables to start a timed process with: pmdb's defaults unless the environment sets them."""
    environ = os.environ if environ is None else environ
    return {key: environ.get(key, value) for key, value in DEFAULTS.items()}


# glibc's M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_MMAP_MAX
_MALLOPT = {"MALLOC_MMAP_THRESHOLD_": -3, "MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_MMAP_MAX_": -4}


def apply_in_process(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Apply :func:`allocator_env` to the running process with glibc's ``mallopt`` (what an in-process timer such as
    ``pmdb collect ops`` needs: it is not started by pmdb, so the environment variables came too late), and export
    them so that the recorded environment says so. Returns what was applied ({} when glibc is not the allocator)."""
    if os.environ.get("LD_PRELOAD"):
        return {}
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return {}
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    applied = {}
    for key, value in allocator_env(environ).items():
        if mallopt(_MALLOPT[key], min(int(value), 2**31 - 1)) == 1:
            os.environ[key] = value
            applied[key] = value
    return applied


def allocator_record(env: Mapping[str, str]) -> dict[str, Any]:
    """What to store with a measurement: the allocator variables of ``env`` (the environment the timed process
    started with; absent = glibc's defaults) and the C library's version."""
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION")
    except (ValueError, OSError, AttributeError):
        libc = None
    return {"libc": libc, **{k: env[k] for k in RECORDED if k in env}}
