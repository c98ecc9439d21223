"""Exact-shape pricing: an op whose very shape was microbenchmarked on the target platform, at the thread count of
what is predicted, is priced by that measurement instead of a model (``--kernels measured``, the default).

A kernel model interpolates between the shapes it was fitted on; where the shape itself was measured, the
measurement is the better estimate. The gap matters most for shapes no sweep resembles: an optimizer's
element-wise ops on a 51 MB vocabulary tensor fault in fresh pages on every call (~50 ms on the AMD host, 12 565
minor faults) and run ~5x slower than any model of the op fitted on cache-sized tensors predicts.

Matching is exact: the row's params become the ops catalogue's config (:func:`collectors.ops.from_traces.to_config`,
as ``pmdb collect ops --from-trace-set`` builds them), and its resume key
(:func:`collectors.ops.sweep.config_key`: op, pass, implementation, dtype, threads, config) selects completed
microbenchmark rows (``v_op_measurements``, source 'microbenchmark', not skipped) of the cache state the model
would have used. Several rows of one key give the median of their medians (µs; a CPU backward row's median
without the autograd engine's own cost of its call, ``node_us``: a node of a step pays its own run only). Embedding lookups carry
settings their traced params do not hold (table sizes, pooling, index sources): they are matched by their rank's
stored tables instead (:meth:`ShapeMedians.embedding_time`, the config ``collect ops --from-traces`` measures).

Rows mined from GPU traces (``pmdb collect mine-traces``: source 'trace', cache state 'device', one row per traced
op call, its kernels' summed device time) price an op of exactly their (op, pass, params) the same way, after the
microbenchmarks: :func:`collectors.traces.kernel_rows.shape_key` is their key, without the thread count (the host's
intra-op threads mean nothing to a GPU kernel, and a GPU trace seldom records them), implementation or dtype (the
simulator prices float32 ops; a shape mined in several dtypes is ambiguous and left to the models). The median of
all mined calls of the shape prices it. Such an op is labelled 'mined', or 'mined-self' where some of those rows
came from the very trace set predicted (in-sample: the prediction is then partly its own trace's kernel times).

What was available is recorded with every prediction: the highest measurement id of the platform at prediction
time (``predictions.measurements_upto``) and how many ops a measurement priced (``predictions.measured_ops``,
mined ones included; the mined ones are also listed by op in ``predictions.unmodelled``, fallback 'mined' or
'mined-self')."""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from typing import Any

from collectors.ops import catalogue
from collectors.ops.catalogue import OpSpec
from collectors.ops.from_traces import to_config
from collectors.ops.sweep import config_key
from collectors.traces.kernel_rows import SOURCE as MINED_SOURCE, shape_key
from pmdb.errors import PmdbError
from pmdb.store import Store

MEASURED, MODELS = "measured", "models"
KERNEL_CHOICES = (MEASURED, MODELS)
DTYPE = "float32"
NEVER = ("embedding_lookup",)  # matched by their tables (embedding_time), never by their traced params
EMBEDDING_OPTIMIZER = "exact_sgd"  # what `collect ops --from-traces` measures lookups' backward with by default
MICROBENCHMARK, MINED, MINED_SELF = "measured", "mined", "mined-self"   # what priced an op (labels)


def check_kernels(kernels: str) -> None:
    """Refuse a --kernels value other than 'measured' or 'models' with one line."""
    if kernels not in KERNEL_CHOICES:
        raise PmdbError(f"bad --kernels {kernels!r}: use {' or '.join(KERNEL_CHOICES)}")


def latest_measurement(store: Store, platform: str) -> int | None:
    """The highest op measurement id of ``platform`` (None: it has none): what a 'measured' prediction could use."""
    upto = store.scalar("SELECT max(measurement_id) FROM op_measurements WHERE platform = ?", [platform])
    return None if upto is None else int(upto)


@dataclass(frozen=True)
class MinedShape:
    """One exact shape mined from GPU traces: the median µs of its traced calls and the trace sets they came from."""

    us: float
    calls: int
    trace_sets: frozenset[int]


class ShapeMedians:
    """Median µs of the microbenchmarked shapes of one platform, by (config key, cache state), and of the shapes
    mined from its GPU traces, by (:func:`shape_key`, cache state)."""

    def __init__(self, medians: dict[tuple[str, str], float], upto: int | None,
                 mined: dict[tuple[str, str], MinedShape] | None = None):
        self.medians = medians
        self.mined = mined or {}
        self.upto = upto            # highest measurement id of the platform when loaded (None: none at all)
        self._specs: dict[str, OpSpec] | None = None
        self._keys: dict[tuple, str | None] = {}

    @classmethod
    def load(cls, store: Store, platform: str) -> "ShapeMedians":
        """Every completed, not skipped microbenchmark row of ``platform``, reduced per (config key, cache state),
        and every row mined from its traces, per (shape key, cache state)."""
        frame = store.query(
            "SELECT config_key, cache_state, median(node_us) AS us FROM v_op_measurements "
            "WHERE platform = ? AND source = 'microbenchmark' AND skipped IS NULL AND median_us > 0 "
            "GROUP BY config_key, cache_state", [platform])
        medians = {(k, s): float(us) for k, s, us in zip(frame["config_key"], frame["cache_state"], frame["us"])}
        return cls(medians, latest_measurement(store, platform), load_mined(store, platform))

    def __len__(self) -> int:
        return len(self.medians) + len(self.mined)

    def _key(self, op: str, pass_: str, implementation: str | None, params: dict[str, Any],
             threads: int) -> str | None:
        """The resume key of a traced shape, None when the catalogue cannot build exactly that shape."""
        if self._specs is None:
            self._specs = catalogue.load()
        spec = self._specs.get(op)
        if spec is None or op in NEVER or pass_ not in spec.passes:
            return None
        impl = implementation if implementation in spec.implementations else spec.implementations[0]
        try:
            config = to_config(spec, params)
        except (PmdbError, ValueError, TypeError, KeyError):
            return None
        return config_key(op, pass_, impl, DTYPE, int(threads), config)

    def embedding_time(self, pass_: str, implementation: str | None, tables: list[dict[str, Any]],
                       threads: int | None, cache_state: str, optimizer: str = EMBEDDING_OPTIMIZER) -> float | None:
        """Measured median µs of one embedding lookup over exactly these tables ({E, D, B, L, source} each, as
        :meth:`simulator.embedding_stats.EmbeddingStats.lookup` gives them) in ``cache_state``; None when not
        measured."""
        if threads is None or not self.medians or not tables:
            return None
        memo = ("embedding_lookup", pass_, implementation, repr(tables), int(threads), optimizer)
        if memo not in self._keys:
            self._keys[memo] = self._embedding_key(pass_, implementation, tables, int(threads), optimizer)
        key = self._keys[memo]
        return None if key is None else self.medians.get((key, cache_state))

    def _embedding_key(self, pass_: str, implementation: str | None, tables: list[dict[str, Any]], threads: int,
                       optimizer: str) -> str | None:
        from collectors.ops.from_traces import embedding_config

        if self._specs is None:
            self._specs = catalogue.load()
        spec = self._specs.get("embedding_lookup")
        if spec is None or pass_ not in spec.passes:
            return None
        impl = implementation if implementation in spec.implementations else spec.implementations[0]
        try:
            config = embedding_config(spec, tables, optimizer)
        except (PmdbError, ValueError, TypeError, KeyError):
            return None
        return config_key("embedding_lookup", pass_, impl, DTYPE, threads, config)

    def time(self, op: str, pass_: str, implementation: str | None, params: dict[str, Any], threads: int | None,
             cache_state: str) -> float | None:
        """Measured median µs of exactly this shape in ``cache_state``; None when it was not measured."""
        found = self.priced(op, pass_, implementation, params, threads, cache_state)
        return None if found is None else found[0]

    def priced(self, op: str, pass_: str, implementation: str | None, params: dict[str, Any], threads: int | None,
               cache_state: str, trace_set_id: int | None = None) -> tuple[float, str] | None:
        """(µs, what priced it) of exactly this shape in ``cache_state``, None when it was neither microbenchmarked
        at ``threads`` nor mined: its microbenchmark ('measured'), else the median of its mined calls ('mined', or
        'mined-self' when some came from ``trace_set_id``, the trace set predicted)."""
        if any(isinstance(v, (list, tuple, dict)) for v in params.values()):
            return None
        if threads is not None and self.medians:
            memo = (op, pass_, implementation, tuple(sorted(params.items())), int(threads))
            if memo not in self._keys:
                self._keys[memo] = self._key(op, pass_, implementation, params, int(threads))
            key = self._keys[memo]
            us = None if key is None else self.medians.get((key, cache_state))
            if us is not None:
                return us, MICROBENCHMARK
        if not self.mined or op in NEVER:
            return None
        memo = (op, pass_, tuple(sorted(params.items())))
        if memo not in self._keys:
            self._keys[memo] = shape_key(op, pass_, params)
        key = self._keys[memo]
        shape = None if key is None else self.mined.get((key, cache_state))
        if shape is None:
            return None
        return shape.us, MINED_SELF if trace_set_id is not None and trace_set_id in shape.trace_sets else MINED


def load_mined(store: Store, platform: str) -> dict[tuple[str, str], MinedShape]:
    """The rows mined from ``platform``'s GPU traces (completed runs), per (shape key, cache state): the median µs of
    every call of the shape and the trace sets they came from. A shape mined in several dtypes is left out (the
    simulator does not know an op's dtype, so such a match would be a guess)."""
    frame = store.query(
        "SELECT m.op, m.pass, CAST(m.params AS VARCHAR) AS params, m.cache_state, m.dtype, m.median_us, "
        "t.trace_set_id FROM v_op_measurements m JOIN traces t ON t.trace_id = m.trace_id "
        "WHERE m.platform = ? AND m.source = ? AND m.skipped IS NULL AND m.median_us > 0", [platform, MINED_SOURCE])
    texts: dict[tuple[str, str, str], str | None] = {}
    grouped: dict[tuple[str, str], tuple[list[float], set[int], set[str]]] = {}
    for op, pass_, text, state, dtype, us, set_id in zip(frame["op"], frame["pass"], frame["params"],
                                                         frame["cache_state"], frame["dtype"], frame["median_us"],
                                                         frame["trace_set_id"]):
        if (op, pass_, text) not in texts:
            texts[(op, pass_, text)] = shape_key(str(op), str(pass_), json.loads(text))
        key = texts[(op, pass_, text)]
        if key is None:
            continue
        times, sets, dtypes = grouped.setdefault((key, str(state)), ([], set(), set()))
        times.append(float(us))
        sets.add(int(set_id))
        dtypes.add(str(dtype))
    return {key: MinedShape(statistics.median(times), len(times), frozenset(sets))
            for key, (times, sets, dtypes) in grouped.items() if len(dtypes) == 1}
