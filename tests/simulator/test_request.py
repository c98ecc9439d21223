"""One prediction request, resolved once (:mod:`simulator.request`): the facts a prediction needs are read before
it (and before any run row) and not read again while it runs; a bad request is refused before a run row; one
session serves every prediction of its target. Real shared traces: PARAM's linear (RTX 2080 Ti, 40 iterations),
HolisticTraceAnalysis's simple add (A100, no iteration markers)."""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

import pytest
from sim_store import ingest

from pmdb import platform as platforms
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store
from simulator.predict import predict, predict_trace_set
from simulator.request import PredictionRequest, resolve

SHARED_GPU = Path(__file__).resolve().parents[3] / "shared" / "data" / "traces" / "gpu"


@pytest.fixture(scope="module")
def traces(tmp_path_factory, empty_workspace) -> tuple[Workspace, int, int]:
    """(workspace, param_linear's set on 'rtx', hta_simple_add's set on 'a100-hta'), Kineto only, imported once
    (param_linear's file parsed once per test run, :func:`harness.parsed_gpu_trace`)."""
    from harness import copy_workspace, parsed_gpu_trace

    if not SHARED_GPU.is_dir():
        pytest.skip(f"shared GPU traces not present at {SHARED_GPU}")
    ws = Workspace(copy_workspace(empty_workspace.home, tmp_path_factory.mktemp("request") / "ws"))
    with Store.open(ws) as store:
        ids = [ingest(store, platforms.ensure_named(store, platform, device_kind="cuda"),
                      parsed_gpu_trace(tmp_path_factory, name, et=False), name, "imported")
               for name, platform in (("param_linear", "rtx"), ("hta_simple_add", "a100-hta"))]
    return ws, ids[0], ids[1]


@pytest.fixture
def opened(traces) -> Iterator[Store]:
    with Store.open(traces[0]) as store:
        yield store


class _Counting:
    """The store's connection, recording the SQL of every statement it runs."""

    def __init__(self, conn: Any):
        self._conn, self.sql = conn, []

    def execute(self, sql: str, *args: Any) -> Any:
        self.sql.append(str(sql))
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@contextlib.contextmanager
def _counted(store: Store) -> Iterator[_Counting]:
    conn = store.conn
    store.conn = counting = _Counting(conn)
    try:
        yield counting
    finally:
        store.conn = conn


LOOKUPS = {"trace set row": "FROM v_trace_sets t JOIN platforms", "iterations": "FROM trace_iterations i JOIN",
           "threads": "SELECT threads FROM trace_sets", "model versions": "FROM model_versions",
           "overhead table": "FROM v_overhead_versions"}


@pytest.mark.parametrize("mode", ["replay", "model"])
def test_a_resolved_request_is_not_looked_up_again(opened, traces, mode):
    store, ts = opened, traces[1]
    resolved = resolve(store, PredictionRequest(trace_set_id=ts, mode=mode))
    assert resolved.trace_set_id == ts and resolved.target_platform == resolved.source_platform == "rtx"
    assert resolved.iterations[0] and not resolved.unmarked
    assert resolved.truth.measured_us and resolved.truth.workload_run_id is None   # the profiled iteration
    assert (resolved.session is not None) == (mode == "model")
    with _counted(store) as conn:
        pred = predict(store, resolved)
    again = [name for name, text in LOOKUPS.items() if any(text in sql for sql in conn.sql)]
    assert not again, f"predicting a resolved request looked up its {', '.join(again)} again"
    # the same prediction as resolving and predicting in one call
    whole = predict_trace_set(store, ts, mode=mode)
    assert pred.predicted_us == pytest.approx(whole.predicted_us) and pred.measured_us == whole.measured_us
    assert pred.overhead_version == whole.overhead_version and pred.model_set == whole.model_set


def test_one_session_serves_every_prediction_of_its_target(opened, traces):
    store, ts = opened, traces[1]
    sessions: dict = {}
    first = resolve(store, PredictionRequest(trace_set_id=ts), sessions)
    assert sessions == {"rtx": first.session} and first.lender == "nvidia-h200"   # no table: the default lender
    with _counted(store) as conn:
        second = resolve(store, PredictionRequest(trace_set_id=ts), sessions)
    assert second.session is first.session
    assert not any(LOOKUPS["model versions"] in sql or LOOKUPS["overhead table"] in sql for sql in conn.sql)


def test_bad_requests_are_refused_before_a_run_row(opened, traces, capsys):
    store, workspace, ts = opened, traces[0], traces[2]
    assert resolve(store, PredictionRequest(trace_set_id=ts, mode="replay")).unmarked
    with pytest.raises(PmdbError, match="replay mode takes every time from the trace"):
        resolve(store, PredictionRequest(trace_set_id=ts, mode="replay", target_platform="rtx"))
    with pytest.raises(PmdbError, match="bad --kernels"):
        resolve(store, PredictionRequest(trace_set_id=ts, kernels="guess"))
    before = store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'predict'")
    store.close()
    for args, message in ((["--mode", "replay", "--target-platform", "rtx"], "replay mode takes"),
                          (["--mode", "replay", "--target-platform", "a100-hta-2"], "unknown platform 'a100-hta-2'"),
                          (["--models", "nothing:1"], "nothing")):
        code = main(["--home", str(workspace.home), "predict", "--trace-set", str(ts), *args])
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and len(err) == 1 and err[0].startswith("pmdb: error:") and message in err[0], err
    with Store.open(workspace, read_only=True) as again:
        assert again.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'predict'") == before
