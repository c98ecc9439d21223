"""Op specifications: name -> parameter axes (default / large grids, random ranges), a builder returning the fwd/bwd
callables, and size estimates (FLOPs, bytes moved, memory held) used to bound grids and enforce the memory cap.

Grids: *default* is the product of the axes' default values whose estimated time is at most DEFAULT_BOUND_US,
thinned (seeded, deterministic) to the op's ``default_count``; *large* the same with the large values and
LARGE_BOUND_US; *random* samples ``n`` configurations (log-uniform per axis, seeded) within the large bound;
*quick* is the default grid thinned to QUICK_COUNT configurations (for `pmdb quickstart`).
"""
from __future__ import annotations

import importlib
import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import torch

from pmdb.errors import PmdbError

FAMILY_MODULES = ("gemm", "conv", "norm", "elementwise", "memory", "embedding", "embedding_dense")
SWEEPS = ("default", "large", "random", "quick")
QUICK_COUNT = 12
DEFAULT_BOUND_US = 2_000.0     # estimated forward time bound of the default grid
LARGE_BOUND_US = 400_000.0     # ... of the large grid and random samples
NOMINAL_FLOPS = 1e11           # FLOP/s and bytes/s used only to estimate times for the bounds above
NOMINAL_BYTES = 1e10
T = TypeVar("T")


@dataclass(frozen=True)
class Axis:
    """One parameter: its default-grid values, large-grid values and random range [low, high].

    kind: 'log' (log-uniform integers), 'int' (uniform integers), 'float' (uniform floats) or 'choice' (one of
    ``choices``, which default to the union of the grid values).
    """

    name: str
    default: tuple
    large: tuple
    low: float | None = None
    high: float | None = None
    kind: str = "log"
    choices: tuple = ()

    def sample(self, rng: np.random.Generator) -> Any:
        low = self.low if self.low is not None else min(self.default + self.large)
        high = self.high if self.high is not None else max(self.default + self.large)
        if self.kind == "log":
            return int(round(math.exp(rng.uniform(math.log(low), math.log(high)))))
        if self.kind == "int":
            return int(rng.integers(int(low), int(high) + 1))
        if self.kind == "float":
            return round(float(rng.uniform(low, high)), 4)
        options = self.choices or tuple(sorted(set(self.default + self.large)))
        return options[int(rng.integers(len(options)))]


@dataclass
class BuildContext:
    """What a builder needs besides the config: where, which type, seeds and embedding settings."""

    device: torch.device
    dtype: torch.dtype = torch.float32
    seed: int = 0
    optimizer: str = "exact_sgd"
    lr: float = 0.01
    implementation: str = "torch"

    def rand(self, *shape: int, requires_grad: bool = False) -> torch.Tensor:
        """A seeded U(-1, 1) tensor on the device."""
        gen = torch.Generator(device="cpu").manual_seed(self.seed)
        out = (torch.rand(*shape, generator=gen, dtype=self.dtype) * 2 - 1).to(self.device)
        return out.requires_grad_(requires_grad)


@dataclass
class Built:
    """A built config: ``fwd()`` and ``bwd()`` run one pass; ``params`` are the stored features (numbers only);
    ``stats`` per-table embedding statistics (embedding lookups only); ``release()`` (optional) breaks reference
    cycles the garbage collector cannot free, so that the config's tensors go as soon as the sweep drops it.
    ``loop()`` (optional, CPU): one training iteration of the op on its next fresh batch, returning its (forward µs,
    backward µs): what the 'loop' cache state times (:func:`collectors.ops.timer.time_loop`). ``engine_bwd``:
    ``bwd()`` (and the loop's backward) is one autograd engine call, whose own set-up a CPU row stores beside it
    (:mod:`collectors.ops.engine_call`)."""

    fwd: Callable[[], Any]
    bwd: Callable[[], Any] | None
    params: dict[str, Any]
    stats: list[dict[str, Any]] | None = None
    keep: tuple = ()
    release: Callable[[], None] | None = None
    loop: Callable[[], tuple[float, float]] | None = None
    engine_bwd: bool = False


def autograd_pair(forward: Callable[[], torch.Tensor], inputs: Sequence[torch.Tensor], params: dict[str, Any],
                  seed: int = 0, keep: tuple = ()) -> Built:
    """fwd = ``forward()`` (building the graph, as in training); bwd = the gradients of ``inputs`` for a fixed
    random output gradient over one retained graph (no accumulation into ``.grad``)."""
    out = forward()
    gen = torch.Generator(device="cpu").manual_seed(seed + 1)
    grad = (torch.rand(out.shape, generator=gen, dtype=out.dtype) * 2 - 1).to(out.device)
    wrt = [t for t in inputs if t.requires_grad]

    def bwd() -> Any:
        return torch.autograd.grad(out, wrt, grad, retain_graph=True)

    return Built(forward, bwd, params, keep=(out, grad, *keep), engine_bwd=True)


@dataclass
class OpSpec:
    """One op: axes, builder and estimates. ``model``: 'ml' (fitted by an ML model, needs many rows) or
    'roofline' (heuristic model, a few dozen rows validate it). ``loops``: its builder gives ``Built.loop`` on a
    CPU, and ``collect ops --from-traces`` times its traced shapes in the 'loop' cache state too."""

    name: str
    family: str
    axes: tuple[Axis, ...]
    build: Callable[[dict[str, Any], BuildContext], Built]
    flops: Callable[[dict[str, Any]], float]
    bytes_moved: Callable[[dict[str, Any]], float]
    memory: Callable[[dict[str, Any]], float]
    model: str = "ml"
    passes: tuple[str, ...] = ("fwd", "bwd")
    cuda_passes: tuple[str, ...] | None = None
    implementations: tuple[str, ...] = ("torch",)
    normalize: Callable[[dict[str, Any]], dict[str, Any] | None] = lambda c: c
    default_count: int = 320
    fixed: dict[str, Any] = field(default_factory=dict)
    make_configs: Callable[..., list[dict[str, Any]]] | None = None
    check_config: Callable[..., dict[str, Any]] | None = None
    loops: bool = False
    _grids: dict[str, list[dict[str, Any]]] = field(default_factory=dict, repr=False, compare=False)

    def passes_on(self, device_type: str) -> tuple[str, ...]:
        """The passes this op has on a device type ('cpu' or 'cuda')."""
        return self.cuda_passes if device_type == "cuda" and self.cuda_passes else self.passes

    def estimate_us(self, config: dict[str, Any]) -> float:
        """Rough forward time for grid bounds (nominal rates, not a model)."""
        return max(self.flops(config) / NOMINAL_FLOPS, self.bytes_moved(config) / NOMINAL_BYTES) * 1e6

    def _complete(self, values: dict[str, Any], bound: float) -> dict[str, Any] | None:
        config = self.normalize({**values, **self.fixed})
        if config is None or self.estimate_us(config) > bound:
            return None
        return config

    def grid(self, which: str) -> list[dict[str, Any]]:
        """The bounded product grid of 'default' or 'large' values (computed once per process)."""
        if which not in self._grids:
            self._grids[which] = self._product(which)
        return [dict(c) for c in self._grids[which]]

    def _product(self, which: str) -> list[dict[str, Any]]:
        names = [a.name for a in self.axes]
        bound = DEFAULT_BOUND_US if which == "default" else LARGE_BOUND_US
        seen, out = set(), []
        for combo in itertools.product(*(getattr(a, which) for a in self.axes)):
            config = self._complete(dict(zip(names, combo)), bound)
            if config is not None and (key := canonical(config)) not in seen:
                seen.add(key)
                out.append(config)
        return out

    def random(self, n: int, rng: np.random.Generator) -> list[dict[str, Any]]:
        out, seen = [], set()
        for _ in range(200 * max(n, 1)):
            if len(out) >= n:
                break
            config = self._complete({a.name: a.sample(rng) for a in self.axes}, LARGE_BOUND_US)
            if config is not None and (key := canonical(config)) not in seen:
                seen.add(key)
                out.append(config)
        return out

    def configs(self, sweep: str, rng: np.random.Generator, sample: int, **extra: Any) -> list[dict[str, Any]]:
        """The configs of a sweep kind ('default', 'large', 'random', 'quick'); ``extra`` goes to ops with their
        own generator (the embedding lookup takes ``sources``)."""
        if sweep not in SWEEPS:
            raise PmdbError(f"bad --sweep {sweep!r}: use {', '.join(SWEEPS)}")
        if self.make_configs is not None:
            return self.make_configs(self, sweep, rng, sample, **extra)
        if sweep == "random":
            return self.random(sample, rng)
        configs = self.grid("large" if sweep == "large" else "default")
        if sweep == "large":
            return configs
        return thin(configs, QUICK_COUNT if sweep == "quick" else self.default_count)

    def check(self, given: dict[str, Any], **extra: Any) -> dict[str, Any]:
        """Validate an explicit config (``--config``): known names, positive numbers; returns it normalised."""
        if self.check_config is not None:
            return self.check_config(given, **extra)
        names = {a.name for a in self.axes} | set(self.fixed)
        unknown = sorted(set(given) - names)
        if unknown:
            raise PmdbError(f"{self.name}: unknown parameter(s) {', '.join(unknown)} "
                            f"(parameters: {', '.join(a.name for a in self.axes)})")
        clashing = [k for k, v in self.fixed.items() if k in given and given[k] != v]
        if clashing:
            raise PmdbError(f"{self.name}: {', '.join(f'{k} is fixed at {self.fixed[k]}' for k in clashing)}")
        missing = [a.name for a in self.axes if a.name not in given]
        if missing:
            raise PmdbError(f"{self.name}: missing parameter(s) {', '.join(missing)}")
        for axis in self.axes:
            value = given[axis.name]
            integral = axis.kind != "float"
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
                    integral and (value != int(value) or (axis.kind == "log" and value < 1))):
                wanted = {"log": "a positive integer", "float": "a number >= 0"}.get(axis.kind, "an integer >= 0")
                raise PmdbError(f"{self.name}: bad value {value!r} for {axis.name} ({wanted} expected)")
        as_numbers = {k: int(v) if float(v).is_integer() else float(v) for k, v in given.items()}
        config = self.normalize({**as_numbers, **self.fixed})
        if config is None:
            raise PmdbError(f"{self.name}: the parameters {canonical(given)} do not make a valid {self.name}")
        return config


def canonical(config: dict[str, Any]) -> str:
    """Canonical JSON text of a config (sorted keys): what config keys hash and duplicates compare."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


def thin(configs: list[T], limit: int, seed: int = 0) -> list[T]:
    """At most ``limit`` configs (or any items), chosen with a fixed seed, in their original order."""
    if len(configs) <= limit:
        return configs
    keep = np.sort(np.random.default_rng(seed).choice(len(configs), size=limit, replace=False))
    return [configs[i] for i in keep]


REGISTRY: dict[str, OpSpec] = {}


@dataclass(frozen=True)
class OptionalParam:
    """A parameter some configs of an op carry beside its grid's (an operand layout, a share of zeros): a value
    ``valid`` accepts (bools never) is stored as ``stored(value)``, and left out of the config when that is falsy
    (the op's plain shape); ``expected`` says what is accepted, in the error line."""

    valid: Callable[[Any], bool]
    expected: str
    stored: Callable[[Any], Any] = lambda value: value
    default: Any = 0


def with_optional(plain: OpSpec, params: dict[str, OptionalParam]) -> Callable[..., dict[str, Any]]:
    """An ``OpSpec.check_config``: the shape checked as ``plain`` checks it, plus ``params`` (name -> its rule)."""
    def check(given: dict[str, Any], **extra: Any) -> dict[str, Any]:
        kept = {}
        for name, param in params.items():
            value = given.get(name, param.default)
            if isinstance(value, bool) or not param.valid(value):
                raise PmdbError(f"{plain.name}: bad value {value!r} for {name} (expected {param.expected})")
            stored = param.stored(value)
            if stored:
                kept[name] = stored
        return {**plain.check({k: v for k, v in given.items() if k not in params}, **extra), **kept}
    return check


def register(spec: OpSpec) -> OpSpec:
    REGISTRY[spec.name] = spec
    return spec


def load() -> dict[str, OpSpec]:
    """All op specs (importing the family modules registers them)."""
    for module in FAMILY_MODULES:
        importlib.import_module(f"collectors.ops.{module}")
    return REGISTRY


def get(name: str) -> OpSpec:
    specs = load()
    if name not in specs:
        raise PmdbError(f"unknown op {name!r} (ops: {', '.join(sorted(specs))})")
    return specs[name]
