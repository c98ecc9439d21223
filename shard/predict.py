"""Predicting a derived plan with the simulator's model mode (kernel, embedding and collective models plus the
overhead table of the target platform), the same way ``pmdb predict`` does for a stored trace set. Times µs.

A placement changes only the embedding lookups and the all_to_all exchanges, so a study refuses to run without the
models that price them: embedding_lookup forward and backward, and all_to_all at the study's world size.
"""
from __future__ import annotations

import time

from pmdb.errors import PmdbError
from pmdb.store import Store
from shard.derive import DerivedPlan
from simulator import semantics as sem_mod
from simulator.engine import simulate, steady_period
from simulator.models import ModelSet, Overheads, check_cache_state, load_model_set
from simulator.records import ModelUse, Prediction
from simulator.threads import comm_shares_core, with_core_rule
from simulator.timing import ModelTiming

LOOKUP = "fbgemm_tbe"  # the implementation the derived traces use (shard.plans refuses other configs)


def missing_models(models: ModelSet, world_size: int) -> list[str]:
    """The models a sharding prediction needs that ``models`` lacks."""
    missing = [f"embedding_lookup {p} (fbgemm_tbe)" for p in ("fwd", "bwd")
               if ("embedding_lookup", p, LOOKUP) not in models.kernels]
    if models.collective("all_to_all", world_size) is None:
        missing.append(f"all_to_all at world size {world_size}")
    return missing


class PlanPredictor:
    """Loads a platform's models and overheads once; predicts any number of derived plans.

    The model selection is the simulator's (as in ``pmdb predict``): ``models`` an alias ('champion', 'latest') or a
    version spec 'name:version,...'; ``cache_state`` warm, cold, device or blend (None: per platform kind, cold on
    CPUs, device timings on GPUs); ``overhead_version`` None for the latest; ``threads`` the intra-op threads per rank
    the plans run with (None: 1), which decide with the platform's cores whether collectives share the ranks' cores
    (:func:`simulator.threads.comm_shares_core`). Every prediction records the selection
    (``Prediction.model_selection``: '<spec>/<cache state>/<digest of the versions>', with '/comm-shares-core' when
    that rule applied)."""

    def __init__(self, store: Store, platform: str, world_size: int, *, models: str = "champion",
                 cache_state: str | None = None, overhead_version: int | None = None, threads: int | None = None):
        check_cache_state(cache_state)
        self.platform = platform
        # a query read to the end: a result left open by scalar()'s fetchone() makes DuckDB refuse the register()
        # that a version spec's model selection needs
        found = store.query("SELECT semantics FROM platforms WHERE name = ?", [platform])["semantics"]
        if found.empty:
            raise PmdbError(f"unknown platform {platform!r}")
        self.semantics = str(found.iloc[0])
        self.models = load_model_set(store, platform, models, cache_state, self.semantics)
        lacking = missing_models(self.models, world_size)
        if lacking:
            raise PmdbError(f"predicting sharding plans on {platform} needs the {', '.join(lacking)} model(s) "
                            f"({models!r} versions{f', {cache_state} cache state' if cache_state else ''}): "
                            f"measure them (`pmdb collect ops --op embedding_lookup`, `pmdb "
                            f"collect comms --ops all_to_all --world-size {world_size}`) and fit them (`pmdb fit`)")
        self.overheads = Overheads.latest(store, platform, overhead_version)
        self.comm_shares_core = comm_shares_core(store, platform, world_size, threads)
        self.selection = with_core_rule(self.models.selection, self.comm_shares_core)

    def predict(self, derived: DerivedPlan, source_platform: str) -> Prediction:
        """The plan's steady-state iteration time (``trace_set_id`` is set when the derived set is stored)."""
        started = time.perf_counter()
        timing = ModelTiming(self.models, self.overheads, self.semantics, derived.embedding)
        programs = timing.programs(derived.graph)
        engine = sem_mod.get(self.semantics, comm_shares_core=self.comm_shares_core)
        result = simulate(programs, engine)
        predicted = steady_period(programs, engine, result)
        used = [ModelUse(n, v, c) for (n, v), c in sorted(timing.usage.models.items())]
        return Prediction(trace_set_id=-1, mode="model", source_platform=source_platform,
                          target_platform=self.platform, result=result, predicted_us=predicted, iterations=1,
                          models=used, overhead_version=self.overheads.version,
                          model_selection=self.selection,
                          unmodelled=timing.usage.unmodelled(float("nan")), elapsed_s=time.perf_counter() - started)

    def embedding_rows(self, pred: Prediction) -> dict[str, int]:
        """How many lookups each embedding model priced in a prediction ({'fwd': n, 'bwd': m})."""
        names = {self.models.kernels[("embedding_lookup", p, LOOKUP)].name: p for p in ("fwd", "bwd")}
        return {p: sum(m.ops_predicted for m in pred.models if names.get(m.name) == p) for p in ("fwd", "bwd")}
