"""A target without an overhead table of its own borrows one, named in the prediction's notes: the host launch path of
a GPU known only by its spec sheet comes from a GPU whose traces were fitted. A table of other semantics is refused.
Real shared GPU trace (param_linear, RTX 2080 Ti), real store."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from fitters.overheads import fit_overheads
from harness import copy_workspace, ingest_gpu_trace
from pmdb import platform as platforms
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store
from simulator.predict import predict_trace_set
from simulator.session import PredictionSession


@pytest.fixture(scope="module")
def lent_template(tmp_path_factory) -> tuple[Workspace, int]:
    """(workspace, trace set): param_resnet's overheads fitted on platform gpu-lender and param_linear imported onto
    gpu-borrower (both RTX 2080 Ti traces, as two platforms), built once per module (skipped without them).
    Read only: tests copy it."""
    ws = Workspace(tmp_path_factory.mktemp("lent") / "ws")
    with Store.open(ws, create=True) as store:
        ingest_gpu_trace(store, "param_resnet", "gpu-lender", tmp_path_factory=tmp_path_factory)
        with store.run("overheads", "gpu-lender", {}) as run:
            fit_overheads(store, run.run_id, "gpu-lender")
        trace_set = ingest_gpu_trace(store, "param_linear", "gpu-borrower", tmp_path_factory=tmp_path_factory)
    return ws, trace_set


@pytest.fixture
def store(tmp_path, lent_template) -> Iterator[Store]:
    """The test's own copy of :func:`lent_template`'s store."""
    with Store.open(Workspace(copy_workspace(lent_template[0].home, tmp_path / "ws"))) as opened:
        yield opened


@pytest.fixture
def lent(lent_template) -> int:
    """The borrower's trace set (param_linear on gpu-borrower)."""
    return lent_template[1]


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
