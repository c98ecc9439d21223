"""Where imported traces were recorded, and with how many intra-op threads.

A Kineto trace names the host that recorded it (``host_name``) and lists the GPUs the profiler saw
(``deviceProperties``, device events); it records no CPU model and no thread count, unless the recording process
wrote ``prof.add_metadata("intra_op_threads", str(torch.get_num_threads()))``. An execution trace names neither.

The platform of an import: a trace recorded on this machine (same host name, and a GPU in the trace exactly when
this machine has one) belongs to this machine's platform, registered as this machine (never as imported data) when
it is not yet; a trace of another machine needs ``--platform NAME`` and becomes an imported platform of that name.
A name is never taken from this machine by an import: this machine's default name, or a new name for a trace of
this machine while the machine is registered under another, is refused with one line.

A trace of another machine (or one naming no host) whose ``deviceProperties`` name a GPU goes, without
``--platform``, to that GPU's platform as ``pmdb platform-specs`` registers it (the device name as a slug, e.g.
'NVIDIA H200' -> ``nvidia-h200``, or a platform whose registered GPU has that name); a GPU not registered yet is
refused with one line naming it and the commands that register it. ``--platform`` always wins. The decision needs
only the traces' metadata, so :func:`plan_platform` runs on headers (:func:`collectors.traces.kineto.read_header`)
before the events are parsed, and a refusal takes a fraction of a second.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from collectors.gpu_specs import slug
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from pmdb.store import Store

THREADS_KEY = "intra_op_threads"  # the Kineto metadata pmdb reads the recording's intra-op thread count from


class Recording(Protocol):
    """What origin reads of a Kineto trace: a parsed :class:`~collectors.traces.kineto.KinetoTrace` or its
    :class:`~collectors.traces.kineto.KinetoHeader`."""

    host: str | None
    threads: int | None
    devices: int
    gpu_names: tuple[str, ...]


@dataclass(frozen=True)
class PlatformChoice:
    """The platform an import goes to; ``local``: it is this machine (detected, not imported data)."""

    name: str
    local: bool


def recorded_threads(kinetos: Sequence[tuple[str, Recording]], given: int | None) -> int | None:
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


def _has_device(trace: Recording) -> bool:
    return bool(trace.devices or len(getattr(trace, "kernels", ())))


def recorded_here(kinetos: Sequence[tuple[str, Recording]], local: dict[str, Any]) -> tuple[bool | None, str]:
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


@dataclass(frozen=True)
class PlatformPlan:
    """What :func:`apply_plan` will do: ``action`` 'existing' (a registered platform), 'local' (register this
    machine, under ``name`` or its registered/default name when None) or 'imported' (a new imported platform)."""

    action: str
    name: str | None
    local: bool
    device_kind: str = "cpu"


def _gpu_platform(store: Store, kinetos: Sequence[tuple[str, Recording]], why: str) -> PlatformPlan | None:
    """The registered platform of the one GPU the traces' deviceProperties name; None when they name none; a GPU
    that is not registered (or several GPUs) is refused naming it and how to register it."""
    gpus = list(dict.fromkeys(g for _, trace in kinetos for g in trace.gpu_names))
    if not gpus:
        return None
    if len(gpus) > 1:
        raise PmdbError(f"{why}; the traces name several GPUs ({', '.join(map(repr, gpus))}): "
                        f"give --platform NAME")
    gpu, target = gpus[0], slug(gpus[0])
    named = store.query("SELECT name FROM platforms WHERE is_imported AND device_kind = 'cuda' AND "
                        "(name = ? OR lower(gpu_name) = lower(?)) ORDER BY name = ? DESC, name", [target, gpu, target])
    if not named.empty:
        return PlatformPlan("existing", str(named.at[0, "name"]), False)
    where = kinetos[0][0]
    held = platforms.find(store, target)
    if held is not None:
        raise PmdbError(f"{why}; its GPU {gpu!r} would go to platform {target!r}, which is "
                        f"{'this machine' if not held.is_imported else 'a CPU platform'}: give --platform NAME")
    raise PmdbError(f"{why}; its deviceProperties name the GPU {gpu!r}, not registered: register it with "
                    f"`pmdb platform-specs SHEET.json` (a spec sheet of it, platform {target}) or "
                    f"`pmdb platform-specs --from-trace {where}`, or give --platform NAME")


def plan_platform(store: Store, name: str | None, kinetos: Sequence[tuple[str, Recording]],
                  device_kind: str | None) -> PlatformPlan:
    """Where traces go (see the module docstring), writing nothing; a refusal raises :class:`PmdbError`.
    ``device_kind`` given means "a platform of another machine" (never this one)."""
    if name is not None:
        platforms.check_name(name)
        found = platforms.find(store, name)
        if found is not None:
            return PlatformPlan("existing", found.name, not found.is_imported)
    elif kinetos and all(trace.host is None for _, trace in kinetos):
        # no host named: this machine is not asked (detecting it imports torch, seconds) unless to be named
        gpu = _gpu_platform(store, kinetos, recorded_here(kinetos, {})[1])
        if gpu is not None:
            return gpu
    local = platforms.detect()
    local["fingerprint"] = platforms.fingerprint(local)
    here, why = recorded_here(kinetos, local)
    registered = _local_name(store, local)
    default = platforms.default_name(local)
    if name is None:
        if here:
            return PlatformPlan("local", None, True)
        gpu = _gpu_platform(store, kinetos, why)
        if gpu is not None:
            return gpu
        this = registered or default
        raise PmdbError(f"{why}: give --platform NAME, the machine it was recorded on (this machine: {this})")
    if (here and device_kind is None) or (name == default and here is None):
        if registered is not None:
            raise PmdbError(f"the traces are of this machine, registered as {registered!r}: give --platform "
                            f"{registered} or leave --platform out (another machine of the same host name: add "
                            f"--device-kind to import them as {name!r})")
        return PlatformPlan("local", name, True)
    if name == default:
        reason = "--device-kind marks another machine" if here else why
        raise PmdbError(f"--platform {name} is this machine's name, but {reason}: name the machine that recorded it")
    kind = device_kind or ("cuda" if any(_has_device(k) for _, k in kinetos) else "cpu")
    return PlatformPlan("imported", name, False, kind)


def apply_plan(store: Store, plan: PlatformPlan) -> PlatformChoice:
    """Register what ``plan`` needs (this machine, or a new imported platform) and return the platform."""
    if plan.action == "local":
        return PlatformChoice(platforms.register_local(store, plan.name)["name"], True)
    if plan.action == "imported":
        return PlatformChoice(platforms.ensure_named(store, plan.name, device_kind=plan.device_kind), False)
    return PlatformChoice(str(plan.name), plan.local)


def choose_platform(store: Store, name: str | None, kinetos: Sequence[tuple[str, Recording]],
                    device_kind: str | None) -> PlatformChoice:
    """The platform traces are imported to (registered here when new); see the module docstring."""
    return apply_plan(store, plan_platform(store, name, kinetos, device_kind))
