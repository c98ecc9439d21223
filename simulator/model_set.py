"""What model mode predicts with: the kernel and collective model versions of a platform, its measured peaks (for
the roofline fallback) and its overhead table (T1–T5 per op name). Times µs."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

import numpy as np
import pandas as pd

from collectors import gpu_specs
from pmdb.errors import PmdbError
from pmdb.platform import Semantics
from pmdb.store import Store
from pmdb.traces.opmap import Mapped, fallback
from simulator.measured_shapes import MEASURED, MODELS


class Predictor(Protocol):
    def predict(self, frame: pd.DataFrame) -> np.ndarray: ...


class ModelRef:
    """One registered model version; the model itself is loaded on first use (a trace needs only a few)."""

    def __init__(self, name: str, version: int, model: Predictor | Callable[[], Predictor], family: str = "",
                 cache_state: str = ""):
        self.name, self.version, self.family, self.cache_state = name, int(version), family, cache_state
        self._model = model if hasattr(model, "predict") else None
        self._load = None if self._model is not None else model

    @property
    def model(self) -> Predictor:
        if self._model is None:
            self._model = self._load()
        return self._model


@dataclass(frozen=True)
class ModelSelection:
    """What a model-mode prediction was asked for and what that selected, stored as columns of ``predictions``:
    the ``--models`` spec (an alias or 'name:version,...'), the cache state ('warm', 'cold', 'device', 'blend' or
    'default'), a digest of every version it selected (first 8 hex of sha256 over sorted 'name:version'), and whether
    the platform's collectives shared the ranks' cores (:func:`simulator.threads.comm_shares_core`)."""

    spec: str
    cache_state: str
    digest: str
    comm_shares_core: bool = False
    kernels: str = MODELS                 # MEASURED: exact shapes priced by their microbenchmarks (measured_shapes)
    measurements_upto: int | None = None  # with 'measured': the highest measurement id of the platform then

    def sharing_core(self, shared: bool) -> "ModelSelection":
        """This selection with the core rule's outcome."""
        return replace(self, comm_shares_core=shared)

    def measuring(self, kernels: str, upto: int | None) -> "ModelSelection":
        """This selection with the --kernels choice and the measurements it could use."""
        return replace(self, kernels=kernels, measurements_upto=upto if kernels == MEASURED else None)

    def label(self) -> str:
        """One short text for tables: 'champion/cold/1a2b3c4d' (+ '/measured', '/comm-shares-core')."""
        return (f"{self.spec}/{self.cache_state}/{self.digest}" + ("/measured" if self.kernels == MEASURED else "")
                + ("/comm-shares-core" if self.comm_shares_core else ""))


@dataclass
class ModelSet:
    """Kernel models by (op, pass, implementation) and collective models by (collective, world size), plus the
    platform's measured peaks (roofline fallback)."""

    kernels: dict[tuple[str, str, str], ModelRef] = field(default_factory=dict)
    warm: dict[tuple[str, str, str], ModelRef] = field(default_factory=dict)  # paired: a kernel's warm partner
    collectives: dict[tuple[str, int], ModelRef] = field(default_factory=dict)
    peaks: dict[str, float] = field(default_factory=dict)
    spec: str = "champion"
    selection: ModelSelection | None = None

    def _key(self, op: str, pass_: str, implementation: str | None) -> tuple[str, str, str] | None:
        for impl in (implementation, "torch"):
            if impl is not None and (op, pass_, impl) in self.kernels:
                return (op, pass_, impl)
        return next((key for key in sorted(self.kernels) if key[:2] == (op, pass_)), None)

    def kernel(self, op: str, pass_: str, implementation: str | None = None) -> ModelRef | None:
        """The model of (op, pass): of that implementation when given and present, else 'torch', else any."""
        key = self._key(op, pass_, implementation)
        return None if key is None else self.kernels[key]

    def priced_as(self, mapped: Any, measured: Callable[[Mapped], bool] = lambda m: False) -> Any:
        """The mapping whose model prices an op: ``mapped`` where this set has its model (or ``measured`` says its
        exact shape was measured), else its fallback where that has one (a scalar-operand mul without a mul_scalar
        model is priced by mul's, :func:`pmdb.traces.opmap.fallback`), else ``mapped`` (the roofline then prices it
        by its own name). NO_WORK and None pass through."""
        other = fallback(mapped) if isinstance(mapped, Mapped) else None
        if other is None or self.kernel(mapped.op, mapped.pass_) is not None or measured(mapped):
            return mapped
        return other if self.kernel(other.op, other.pass_) is not None or measured(other) else mapped

    def warm_partner(self, op: str, pass_: str, implementation: str | None = None) -> ModelRef | None:
        """In a paired set (blend, reuse, a CPU's default), the warm model paired with :meth:`kernel`'s (cold) one."""
        key = self._key(op, pass_, implementation)
        return None if key is None else self.warm.get(key)

    def collective(self, kind: str, world_size: int) -> ModelRef | None:
        """The model of a collective at this world size (all_to_all and all_to_allv stand in for each other)."""
        for name in (kind, {"all_to_all": "all_to_allv", "all_to_allv": "all_to_all"}.get(kind, kind)):
            if (name, world_size) in self.collectives:
                return self.collectives[(name, world_size)]
        return None


def platform_peaks(store: Store, platform: str) -> dict[str, float]:
    """Latest measured peaks of a platform (``gemm_flops`` FLOP/s, ``mem_bw`` bytes/s, ...); a GPU known by its
    spec sheet has its nominal FP32 rate and bandwidth where nothing was measured on it."""
    frame = store.query("SELECT metric, max(value) AS value FROM v_platform_peaks WHERE platform = ? "
                        "AND (dtype IS NULL OR dtype = 'float32') GROUP BY metric", [platform])
    return {**gpu_specs.peaks(store, platform), **{m: float(v) for m, v in zip(frame["metric"], frame["value"])}}


IN_CONTEXT, PLAIN = "in-context", "plain"
COLLECTIVE_CHOICES = (IN_CONTEXT, PLAIN)
PLAIN_SUFFIX = "+plain"   # a spec ending in it prices collectives by the plain microbenchmark curves


def collective_choice(spec: str) -> tuple[str, str]:
    """'champion+plain' -> ('champion', 'plain'); any other spec -> (spec, 'in-context'): collectives are priced by
    their in-context versions (family ``in_context``, :mod:`fitters.collective_context`) where the selection holds
    one, else by the plain curve."""
    if spec.endswith(PLAIN_SUFFIX):
        return spec[:-len(PLAIN_SUFFIX)], PLAIN
    return spec, IN_CONTEXT


def with_collectives(spec: str, choice: str) -> str:
    """``spec`` with the plain curves chosen when ``choice`` is 'plain'; 'in-context' (the default) leaves it as it
    is (a spec that ends in '+plain' already keeps the plain curves)."""
    if choice not in COLLECTIVE_CHOICES:
        raise PmdbError(f"bad --collectives {choice!r}: use {' or '.join(COLLECTIVE_CHOICES)}")
    return collective_choice(spec)[0] + PLAIN_SUFFIX if choice == PLAIN else spec


def choose_collectives(refs: list[Any], choice: str) -> list[Any]:
    """The selected versions without the collective versions ``choice`` does not price with: 'plain' drops the
    in-context ones; 'in-context' drops the plain curve of every (collective, world size) that has one."""
    def scaled(ref: Any) -> bool:
        return ref.is_collective and ref.family == "in_context"

    if choice == PLAIN:
        return [r for r in refs if not scaled(r)]
    covered = {(r.op, r.world_size) for r in refs if scaled(r)}
    return [r for r in refs if not (r.is_collective and not scaled(r) and (r.op, r.world_size) in covered)]


def parse_spec(spec: str) -> tuple[str, dict[str, int] | None]:
    """'champion' -> (alias, None); 'name:3,other:1' -> ('', {name: 3, other: 1}); a '+plain' suffix (the
    collectives' choice, :func:`collective_choice`) is left out."""
    spec = collective_choice(spec)[0]
    if ":" not in spec:
        return spec, None
    versions = {}
    for item in spec.split(","):
        name, _, version = item.strip().rpartition(":")
        if not name or not version.isdigit():
            raise PmdbError(f"bad model version spec {item!r}: use NAME:VERSION[,NAME:VERSION...] or an alias")
        versions[name] = int(version)
    return "", versions


CACHE_PREFERENCE = {Semantics.SYNC_HOST: ("cold", "warm", "device"), Semantics.ASYNC_DEVICE: ("device", "warm", "cold")}


BLEND = "blend"
REUSE = "reuse"
CACHE_STATES = ("warm", "cold", "device", BLEND, REUSE)   # what model selection takes (None: per platform kind)
PAIRED = (BLEND, REUSE)   # cache states that keep a warm and a cold model per op


def check_cache_state(cache_state: str | None) -> None:
    """Refuse a cache state the model selection does not know (None is its default), as a one-line user error."""
    if cache_state is not None and cache_state not in CACHE_STATES:
        raise PmdbError(f"bad --cache-state {cache_state!r}: use {', '.join(CACHE_STATES[:-1])} or "
                        f"{CACHE_STATES[-1]}")


def load_model_set(store: Store, platform: str, spec: str = "champion", cache_state: str | None = None,
                   semantics: Semantics = Semantics.SYNC_HOST) -> ModelSet:
    """The versions ``spec`` selects (an alias such as 'champion', or 'name:version,...') of ``platform``, loaded
    lazily. Where one (op, pass, implementation) has models of several cache states, the one that matches in-context
    times best on the platform kind is used (cold on CPUs, device timings on GPUs) unless ``cache_state`` says;
    ``cache_state='blend'`` keeps a warm and a cold model per op (their geometric mean is used, see timing), and so
    do ``'reuse'`` (each op between the two by its operands' reuse distances, :mod:`simulator.cache_levels`) and the
    default on a CPU (reuse where the run recorded the LLC it found, :mod:`simulator.llc_found`; else cold).
    Collectives are priced by their in-context versions where the selection holds one, unless ``spec`` ends in
    '+plain' (:func:`choose_collectives`)."""
    from fitters.load import load_model, select_models

    alias, versions = parse_spec(spec)
    # paired: a warm and a cold model per op; on a CPU by default too, for a run whose memory probes recorded the
    # LLC it found (its ops are then priced by reuse distance, simulator.timing; without one, cold as before)
    paired = cache_state in PAIRED or (cache_state is None and semantics == Semantics.SYNC_HOST)
    refs = select_models(store, platform, alias or "champion", versions=versions,
                         cache_state=None if paired else cache_state)
    refs = choose_collectives(refs, collective_choice(spec)[1])
    digest = hashlib.sha256(",".join(sorted(f"{r.name}:{r.version}" for r in refs)).encode()).hexdigest()[:8]
    order = CACHE_PREFERENCE.get(semantics, ())
    rank = {state: i for i, state in enumerate(order)}
    out = ModelSet(peaks=platform_peaks(store, platform), spec=spec,
                   selection=ModelSelection(spec, cache_state or "default", digest))
    chosen: dict[tuple, Any] = {}
    for ref in refs:
        if ref.is_collective:
            key: tuple = ("collective", ref.op, int(ref.world_size))
        else:
            key = (ref.op, ref.pass_, ref.implementation or "torch") + ((ref.cache_state,) if paired else ())
        best = chosen.get(key)
        if best is None or rank.get(ref.cache_state, 99) < rank.get(best.cache_state, 99):
            chosen[key] = ref
    for key, ref in chosen.items():
        loaded = ModelRef(ref.name, int(ref.version),
                          lambda ref=ref: load_model(store.workspace, ref.name, ref.version), ref.family,
                          ref.cache_state or "")
        if key[0] == "collective":
            out.collectives[(key[1], key[2])] = loaded
        elif paired and key[3] == "warm":
            out.warm[key[:3]] = loaded
        else:
            out.kernels[key[:3]] = loaded
    if paired:  # ops with a warm model only are predicted by it alone
        for key, ref in list(out.warm.items()):
            if key not in out.kernels:
                out.kernels[key] = out.warm.pop(key)
    return out


MIN_SIZED = 2   # samples a (name, kind, size class) needs before it prices ops of that name by size


@dataclass
class Overheads:
    """Mean overheads per (op name, kind) of one overhead version (µs), and per (op name, kind) its means by input
    size class where the version sampled them (CPU T2/T3/T5, migration 0020), in class order."""

    version: int | None = None
    table: dict[tuple[str, str], float] = field(default_factory=dict)
    _typical: dict[str, float] = field(default_factory=dict, repr=False)
    sized: dict[tuple[str, str], list[tuple[int, float]]] = field(default_factory=dict)

    def get(self, name: str, kind: str, size_class: int | None = None) -> float | None:
        """With ``size_class``, where the name was sampled by size: the mean of that class, else of the nearest
        sampled class below it (an op grown past what was traced, as a what-if's, keeps the largest traced price
        below it), else of the smallest; otherwise the name's mean."""
        curve = self.sized.get((name, kind)) if size_class is not None else None
        if not curve:
            return self.table.get((name, kind))
        found = curve[0][1]
        for size, mean in curve:   # in class order, a few classes per name
            if size > size_class:
                break
            found = mean
        return found

    def typical(self, kind: str) -> float:
        """Median over op names of one kind (for names the table does not hold)."""
        if kind not in self._typical:
            values = [v for (_, k), v in self.table.items() if k == kind]
            self._typical[kind] = float(np.median(values)) if values else 0.0
        return self._typical[kind]

    @classmethod
    def latest(cls, store: Store, platform: str, version: int | None = None) -> "Overheads":
        """The given or newest completed overhead version of a platform (empty when there is none)."""
        if version is None:
            version = store.scalar("SELECT max(overhead_version) FROM v_overhead_versions WHERE platform = ?",
                                   [platform])
        else:
            owner = store.scalar("SELECT platform FROM v_overhead_versions WHERE overhead_version = ?", [version])
            if owner is None:
                raise PmdbError(f"no completed overhead version {version}")
            if owner != platform:
                raise PmdbError(f"overhead version {version} belongs to platform {owner}, not {platform}: "
                                f"pick one of {platform}'s versions (or none for its latest)")
        if version is None:
            return cls()
        frame = store.query("SELECT op_name, kind, mean_us FROM overheads WHERE overhead_version = ?", [int(version)])
        sized = store.query("SELECT op_name, kind, size_class, mean_us FROM overhead_sizes WHERE overhead_version = ? "
                            "AND count >= ? ORDER BY op_name, kind, size_class", [int(version), MIN_SIZED])
        curves: dict[tuple[str, str], list[tuple[int, float]]] = {}
        for n, k, c, v in zip(sized["op_name"], sized["kind"], sized["size_class"], sized["mean_us"]):
            curves.setdefault((n, k), []).append((int(c), float(v)))
        return cls(int(version), {(n, k): float(v) for n, k, v in zip(frame["op_name"], frame["kind"],
                                                                       frame["mean_us"])}, sized=curves)


def describe(models: ModelSet) -> dict[str, Any]:
    """Counts for messages and run summaries."""
    return {"kernel_models": len(models.kernels), "collective_models": len(models.collectives),
            "peaks": sorted(models.peaks)}


def default_lender(store: Store, target: str, semantics: Semantics) -> str | None:
    """The platform whose overhead table prices the host path of a GPU ``target`` that has none of its own: the
    platform of the shipped host-path sample (today's host: torch 2.11 on an H200), its newest stored table, or the
    sample itself stored as one (:func:`fitters.overheads.store_sample`, once per store). None for a target with a
    table, a CPU target (sync_host, whose ops run on the host) or a read-only store without the lender's table."""
    from fitters.overheads import store_sample
    from pmdb.samples import host_path

    if semantics is not Semantics.ASYNC_DEVICE or Overheads.latest(store, target).version is not None:
        return None
    known = store.scalar("SELECT count(*) FROM platforms WHERE name = ?", [host_path.PLATFORM])
    if known and Overheads.latest(store, host_path.PLATFORM).version is not None:
        return host_path.PLATFORM
    if store.read_only:
        return None
    store_sample(store, host_path.TABLE)
    return host_path.PLATFORM
