"""Where imported traces were recorded, and with how many intra-op threads.

A Kineto trace names the host that recorded it (``host_name``) and lists the GPUs the profiler saw
(``deviceProperties``, device events); it records no CPU model and no thread count, unless the recording process
wrote ``prof.add_metadata("intra_op_threads", str(torch.get_num_threads()))``. An execution trace names neither.

The platform of an import: a trace recorded on this machine (same host name, and a GPU in the trace exactly when
this machine has one) belongs to this machine's platform, registered as this machine (never as imported data) when
it is not yet; a trace of another machine needs ``--platform NAME`` and becomes an imported platform of that name.
A name is never taken from this machine by an import: this machine's default name, or a new name for a trace of
this machine while the machine is registered under another, is refused with one line.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from collectors.traces.kineto import KinetoTrace
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store

THREADS_KEY = "intra_op_threads"  # the Kineto metadata pmdb reads the recording's intra-op thread count from


@dataclass(frozen=True)
class PlatformChoice:
    """The platform an import goes to; ``local``: it is this machine (detected, not imported data)."""

    name: str
    local: bool


def recorded_threads(kinetos: list[tuple[str, KinetoTrace]], given: int | None) -> int | None:
    """Intra-op threads per rank of the recording: the traces' ``intra_op_threads`` metadata, else ``given``
    (``--threads``); None when neither says. Traces that disagree with each other or with ``given`` are refused."""
    found = {k.threads: where for where, k in kinetos if k.threads is not None}
    if len(found) > 1:
        raise PmdbError(f"the traces record different intra-op thread counts ({THREADS_KEY}: "
                        + ", ".join(f"{t} in {w}" for t, w in sorted(found.items())) + "): import them apart")
    if found and given is not None and given not in found:
        (threads, where), = found.items()
        raise PmdbError(f"{where} records {threads} intra-op thread(s) ({THREADS_KEY}), but --threads says {given}")
    return given if given is not None else next(iter(found), None)


def _has_device(trace: KinetoTrace) -> bool:
    return bool(trace.devices or len(trace.kernels))


def recorded_here(kinetos: list[tuple[str, KinetoTrace]], local: dict[str, Any]) -> tuple[bool | None, str]:
    """(True: recorded on this machine, False: elsewhere, None: the files cannot tell; the reason in words)."""
    if not kinetos:
        return None, "an execution trace alone does not name the machine that recorded it"
    hostname = local.get("hostname") or socket.gethostname()
    for where, trace in kinetos:
        if trace.host is None:
            return None, f"{where} does not name the host that recorded it (no 'host_name')"
        if trace.host != hostname:
            return False, f"{where} was recorded on host {trace.host!r}, not on this machine ({hostname!r})"
        if _has_device(trace) != (local["device_kind"] == platforms.DeviceKind.CUDA.value):
            what = "a GPU" if _has_device(trace) else "no GPU"
            return False, f"{where} was recorded with {what} on host {trace.host!r}, unlike this machine"
    return True, f"recorded on this machine (host {hostname!r})"


def _local_name(store: Store, local: dict[str, Any]) -> str | None:
    """The name this machine is registered under (its fingerprint, not imported), None when not registered."""
    return store.scalar("SELECT name FROM platforms WHERE fingerprint = ? AND NOT is_imported "
                        "ORDER BY registered_at LIMIT 1", [platforms.fingerprint(local)])


def choose_platform(store: Store, name: str | None, kinetos: list[tuple[str, KinetoTrace]],
                    device_kind: str | None) -> PlatformChoice:
    """The platform traces are imported to (registered here when new); see the module docstring.
    ``device_kind`` given means "a platform of another machine" (never this one)."""
    if name is not None:
        platforms.check_name(name)
        found = platforms.find(store, name)
        if found is not None:
            return PlatformChoice(found.name, not found.is_imported)
    local = platforms.detect()
    local["fingerprint"] = platforms.fingerprint(local)
    here, why = recorded_here(kinetos, local)
    registered = _local_name(store, local)
    default = platforms.default_name(local)
    if name is None:
        if here:
            return PlatformChoice(platforms.register_local(store)["name"], True)
        this = registered or default
        raise PmdbError(f"{why}: give --platform NAME, the machine it was recorded on (this machine: {this})")
    if (here and device_kind is None) or (name == default and here is None):
        if registered is not None:
            raise PmdbError(f"the traces are of this machine, registered as {registered!r}: give --platform "
                            f"{registered} or leave --platform out (another machine of the same host name: add "
                            f"--device-kind to import them as {name!r})")
        return PlatformChoice(platforms.register_local(store, name)["name"], True)
    if name == default:
        reason = "--device-kind marks another machine" if here else why
        raise PmdbError(f"--platform {name} is this machine's name, but {reason}: name the machine that recorded it")
    kind = device_kind or ("cuda" if any(_has_device(k) for _, k in kinetos) else "cpu")
    return PlatformChoice(platforms.ensure_named(store, name, device_kind=kind), False)
