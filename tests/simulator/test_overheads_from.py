"""A target without an overhead table of its own borrows one, named in the prediction's notes: the host launch path of
a GPU known only by its spec sheet comes from a GPU whose traces were fitted. A table of other semantics is refused.
Real shared GPU trace (param_linear, RTX 2080 Ti), real store."""
from __future__ import annotations

import pytest

from fitters.overheads import fit_overheads
from pmdb import platform as platforms
from pmdb.errors import PmdbError
from simulator.predict import predict_trace_set
from simulator.session import PredictionSession


@pytest.fixture
def lent(store, gpu_trace):
    """param_resnet's overheads lent to the platform of param_linear (both RTX 2080 Ti traces, as two platforms)."""
    gpu_trace("param_resnet", "gpu-lender")
    with store.run("overheads", "gpu-lender", {}) as run:
        fit_overheads(store, run.run_id, "gpu-lender")
    return gpu_trace("param_linear", "gpu-borrower")


def test_borrowed_overheads_are_used_and_named(store, lent):
    own = predict_trace_set(store, lent, mode="model")   # no table of its own: the default lender (test_default_lender)
    assert any("no fitted kernel models" in note for note in own.defaults)
    borrowed = predict_trace_set(store, lent, mode="model", overheads_from="gpu-lender")
    version = store.scalar("SELECT max(overhead_version) FROM v_overhead_versions WHERE platform = 'gpu-lender'")
    assert borrowed.overhead_version == version != own.overhead_version    # --overheads-from wins
    assert [n for n in borrowed.defaults if "overheads" in n] == [f"host overheads (T1-T5) from platform gpu-lender's overhead version {version}, "
                                 f"not gpu-borrower's own"]
    assert borrowed.predicted_us != own.predicted_us  # another host path, another step


def test_a_table_of_other_semantics_or_none_is_refused(store, lent):
    platforms.ensure_named(store, "cpu-other", device_kind="cpu")
    with pytest.raises(PmdbError, match="runs sync_host"):
        PredictionSession(store, "gpu-borrower", overheads_from="cpu-other")
    platforms.ensure_named(store, "gpu-empty", device_kind="cuda")
    with pytest.raises(PmdbError, match="no overhead table to lend"):
        PredictionSession(store, "gpu-borrower", overheads_from="gpu-empty")
