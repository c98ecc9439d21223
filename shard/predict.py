"""Predicting a derived plan with the simulator's model mode (kernel, embedding and collective models plus the
overhead table of the target platform), the same way ``pmdb predict`` does for a stored trace set. Times µs.

A placement changes only the embedding lookups and the all_to_all exchanges, so a study refuses to run without the
models that price them: embedding_lookup forward and backward, and all_to_all at the study's world size.
"""
from __future__ import annotations

from pmdb.errors import PmdbError
from pmdb.store import Store
from shard.derive import DerivedPlan
from simulator.model_set import ModelSet
from simulator.store_rows import Prediction
from simulator.session import PredictionSession

LOOKUP = "fbgemm_tbe"  # the implementation the derived traces use (shard.plans refuses other configs)


def missing_models(models: ModelSet, world_size: int) -> list[str]:
    """The models a sharding prediction needs that ``models`` lacks."""
    missing = [f"embedding_lookup {p} (fbgemm_tbe)" for p in ("fwd", "bwd")
               if ("embedding_lookup", p, LOOKUP) not in models.kernels]
    if models.collective("all_to_all", world_size) is None:
        missing.append(f"all_to_all at world size {world_size}")
    return missing


class PlanPredictor:
    """A prediction session on the study's platform (:class:`simulator.session.PredictionSession`, the same set-up
    as ``pmdb predict``) that refuses to start without the models a placement changes, and predicts any number of
    derived plans. ``threads`` is the intra-op threads per rank the plans run with (None: 1); with the platform's
    cores it decides whether collectives share the ranks' cores. Every prediction records the selection
    (``Prediction.model_selection``)."""

    def __init__(self, store: Store, platform: str, world_size: int, *, models: str = "champion",
                 cache_state: str | None = None, overhead_version: int | None = None, threads: int | None = None):
        self.session = PredictionSession(store, platform, models=models, cache_state=cache_state,
                                         overhead_version=overhead_version)
        self.platform, self.models, self.threads = platform, self.session.models, threads
        lacking = missing_models(self.models, world_size)
        if lacking:
            raise PmdbError(f"predicting sharding plans on {platform} needs the {', '.join(lacking)} model(s) "
                            f"({models!r} versions{f', {cache_state} cache state' if cache_state else ''}): "
                            f"measure them (`pmdb collect ops --op embedding_lookup`, `pmdb "
                            f"collect comms --ops all_to_all --world-size {world_size}`) and fit them (`pmdb fit`)")
        self.comm_shares_core = self.session.shares_core(world_size, threads)

    def predict(self, derived: DerivedPlan, source_platform: str) -> Prediction:
        """The plan's steady-state iteration time (``trace_set_id`` is set when the derived set is stored)."""
        return self.session.prediction(derived.graph, derived.embedding, source_platform=source_platform,
                                       threads=self.threads)

    def embedding_rows(self, pred: Prediction) -> dict[str, int]:
        """How many lookups each embedding model priced in a prediction ({'fwd': n, 'bwd': m})."""
        names = {self.models.kernels[("embedding_lookup", p, LOOKUP)].name: p for p in ("fwd", "bwd")}
        return {p: sum(m.ops_predicted for m in pred.models if names.get(m.name) == p) for p in ("fwd", "bwd")}
