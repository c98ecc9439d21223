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
would have used. Several rows of one key give the median of their medians (µs). Embedding lookups carry
settings their traced params do not hold (table sizes, pooling, index sources): they are matched by their rank's
stored tables instead (:meth:`ShapeMedians.embedding_time`, the config ``collect ops --from-traces`` measures).

What was available is recorded with every prediction: the highest measurement id of the platform at prediction
time (``predictions.measurements_upto``) and how many ops a measurement priced (``predictions.measured_ops``)."""
from __future__ import annotations

from typing import Any

from collectors.ops import catalogue
from collectors.ops.catalogue import OpSpec
from collectors.ops.from_traces import to_config
from collectors.ops.sweep import config_key
from pmdb.errors import PmdbError
from pmdb.store import Store

MEASURED, MODELS = "measured", "models"
KERNEL_CHOICES = (MEASURED, MODELS)
DTYPE = "float32"
NEVER = ("embedding_lookup",)  # matched by their tables (embedding_time), never by their traced params
EMBEDDING_OPTIMIZER = "exact_sgd"  # what `collect ops --from-traces` measures lookups' backward with by default


def check_kernels(kernels: str) -> None:
    """Refuse a --kernels value other than 'measured' or 'models' with one line."""
    if kernels not in KERNEL_CHOICES:
        raise PmdbError(f"bad --kernels {kernels!r}: use {' or '.join(KERNEL_CHOICES)}")


def latest_measurement(store: Store, platform: str) -> int | None:
    """The highest op measurement id of ``platform`` (None: it has none): what a 'measured' prediction could use."""
    upto = store.scalar("SELECT max(measurement_id) FROM op_measurements WHERE platform = ?", [platform])
    return None if upto is None else int(upto)


class ShapeMedians:
    """Median µs of the microbenchmarked shapes of one platform, by (config key, cache state)."""

    def __init__(self, medians: dict[tuple[str, str], float], upto: int | None):
        self.medians = medians
        self.upto = upto            # highest measurement id of the platform when loaded (None: none at all)
        self._specs: dict[str, OpSpec] | None = None
        self._keys: dict[tuple, str | None] = {}

    @classmethod
    def load(cls, store: Store, platform: str) -> "ShapeMedians":
        """Every completed, not skipped microbenchmark row of ``platform``, reduced per (config key, cache state)."""
        frame = store.query(
            "SELECT config_key, cache_state, median(median_us) AS us FROM v_op_measurements "
            "WHERE platform = ? AND source = 'microbenchmark' AND skipped IS NULL AND median_us > 0 "
            "GROUP BY config_key, cache_state", [platform])
        medians = {(k, s): float(us) for k, s, us in zip(frame["config_key"], frame["cache_state"], frame["us"])}
        return cls(medians, latest_measurement(store, platform))

    def __len__(self) -> int:
        return len(self.medians)

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
        if threads is None or not self.medians or any(isinstance(v, (list, tuple, dict)) for v in params.values()):
            return None
        memo = (op, pass_, implementation, tuple(sorted(params.items())), int(threads))
        if memo not in self._keys:
            self._keys[memo] = self._key(op, pass_, implementation, params, int(threads))
        key = self._keys[memo]
        return None if key is None else self.medians.get((key, cache_state))
