"""`pmdb collect relaunch`: launches of a stored run added to its ground truth, on real ranks and a real store."""
from __future__ import annotations

import json

import numpy as np
import pytest

from collectors.workloads.collect import collect_workload
from collectors.workloads.relaunch import ground_truth_of, launch_medians, relaunch, stored_request
from collectors.workloads.requests import dlrm_request
from pmdb.cli.main import main
from pmdb.errors import PmdbError
from pmdb.store import Store

pytestmark = pytest.mark.slow

OPTS = {"iters": 3, "warmup": 1, "threads": 1, "no_trace": True, "timeout_s": 180}


def _stored_run(store, platform, config, **more) -> str:
    """A workload run collected as the CLI does (its options stored as its args); its run id."""
    opts = {**OPTS, "config": config, **more}
    collect_workload(store, platform, dlrm_request(store, opts),
                     {"family": "dlrm", **{k: str(v) if k == "config" else v for k, v in opts.items()},
                      "timeout": opts["timeout_s"]})
    return store.scalar("SELECT run_id FROM collection_runs WHERE kind = 'workload' ORDER BY started_at DESC LIMIT 1")


def _worst(store, run_id: str) -> list[float]:
    frame = store.query("SELECT iteration, max(time_us) AS w FROM v_e2e_measurements WHERE run_id = ? "
                        "GROUP BY iteration ORDER BY iteration", [run_id])
    return frame["w"].tolist()


def test_relaunches_join_the_ground_truth_as_the_median_of_launch_medians(store, local_platform, tiny_dlrm):
    from simulator.memory_phase import truth_times

    run_id = _stored_run(store, local_platform, tiny_dlrm, world_size=2, sharder="naive")
    first = store.scalar("SELECT measured_us FROM v_workload_runs WHERE run_id = ?", [run_id])
    probes = len(truth_times(store, run_id))
    summary = relaunch(store, run_id, launches=2)
    # rank 0 probed memory before and after each launch: the probes found at the truth count the relaunches'
    assert probes == 2 and len(truth_times(store, run_id)) == probes + 2 * 2
    added = store.scalar("SELECT run_id FROM collection_runs WHERE kind = 'relaunch' AND status = 'completed'")
    assert json.loads(store.scalar("SELECT CAST(args AS VARCHAR) FROM collection_runs WHERE run_id = ?",
                                   [added]))["adds_to"] == run_id
    # the relaunch's own rows: 2 launches x 3 iterations x 2 ranks; the workload run's rows are untouched
    assert store.scalar("SELECT count(*) FROM v_e2e_measurements WHERE run_id = ?", [added]) == 2 * 3 * 2
    assert store.scalar("SELECT count(*) FROM v_e2e_measurements WHERE run_id = ?", [run_id]) == 3 * 2
    own, more = _worst(store, run_id), _worst(store, added)
    medians = [float(np.median(own)), float(np.median(more[:3])), float(np.median(more[3:]))]
    assert medians[0] == pytest.approx(first)
    assert summary["launch_medians_us"] == pytest.approx([round(m, 1) for m in medians], abs=0.06)
    stored = store.query("SELECT measured_us, spread FROM v_workload_runs WHERE run_id = ?", [run_id]).iloc[0]
    steps = np.array(own + more)
    p10, p90 = np.percentile(steps, [10, 90])
    assert stored["measured_us"] == pytest.approx(float(np.median(medians)))
    assert stored["spread"] == pytest.approx((p90 - p10) / np.median(steps))
    assert summary["measured_us_before"] == pytest.approx(first)
    assert summary["measured_us"] == pytest.approx(stored["measured_us"])
    # the request rebuilt from the stored options is the run's own (same sharding plan), without traces
    request, platform = stored_request(store, run_id)
    assert platform == local_platform and request.trace_iters == 0 and request.world_size == 2
    assert request.sharder == "naive" and request.iters == 3


def test_a_settled_run_is_not_relaunched_and_a_failed_relaunch_changes_nothing(store, local_platform, tiny_dlrm):
    run_id = _stored_run(store, local_platform, tiny_dlrm)
    before = store.scalar("SELECT measured_us FROM v_workload_runs WHERE run_id = ?", [run_id])
    settled = relaunch(store, run_id, min_launches=1, tolerance=10.0)
    assert settled["settled"] and settled["measured_us"] == before
    assert not store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'relaunch'")
    # a timeout no launch can meet: the relaunch fails, the ground truth and its rows stay as they were
    with pytest.raises(Exception, match="(?i)timed? ?out|took longer"):
        relaunch(store, run_id, timeout_s=0.05)
    assert store.scalar("SELECT status FROM collection_runs WHERE kind = 'relaunch'") == "failed"
    assert store.scalar("SELECT measured_us FROM v_workload_runs WHERE run_id = ?", [run_id]) == before
    assert launch_medians(store, run_id)[0] == pytest.approx([before])


def test_ground_truth_of_known_launches():
    measured, spread = ground_truth_of([10.0, 30.0, 20.0], np.array([10.0, 10.0, 20.0, 30.0, 30.0]))
    assert measured == 20.0
    assert spread == pytest.approx((30.0 - 10.0) / 20.0)


def test_runs_that_cannot_be_relaunched_are_refused_in_one_line(store, local_platform, tiny_dlrm, workspace, capsys):
    run_id = _stored_run(store, local_platform, tiny_dlrm)
    with pytest.raises(PmdbError, match="no run 'nosuch'"):
        stored_request(store, "nosuch")
    ops = store.start_run("ops", local_platform, {})
    with pytest.raises(PmdbError, match="not a measured workload run"):
        stored_request(store, ops.run_id)
    tiny_dlrm.write_text(tiny_dlrm.read_text().replace("1500", "1600"))   # the shape file changed since
    with pytest.raises(PmdbError, match="no longer describe its workload"):
        stored_request(store, run_id)
    store.conn.execute("UPDATE collection_runs SET args = json_merge_patch(args, '{\"launcher\": \"torchrun\"}') "
                       "WHERE run_id = ?", [run_id])
    with pytest.raises(PmdbError, match="torchrun job"):
        stored_request(store, run_id)
    store.close()
    for argv, pattern in ((["nosuchrun"], "no run 'nosuchrun'"), ([run_id, "--launches", "0"], "--launches must")):
        code = main(["--home", str(workspace.home), "collect", "relaunch", *argv])
        err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert code == 2 and len(err) == 1 and err[0].startswith("pmdb: error: ") and pattern in err[0], err
    with Store.open(workspace) as again:   # nothing was relaunched
        assert not again.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'relaunch'")


def test_the_quickstart_relaunches_its_workload_runs_between_the_shape_rounds(store, local_platform, tiny_dlrm,
                                                                              workspace, capsys):
    from pmdb.cli import quickstart

    names = [step.name for step in quickstart.steps("reports")]
    for k in range(2, quickstart.SHAPE_ROUNDS + 1):   # truth k comes after shape round k - 1, before round k
        previous = "ops-from-traces" if k == 2 else f"ops-from-traces-{k - 1}"
        assert names.index(previous) < names.index(f"truth-{k}") < names.index(f"ops-from-traces-{k}")
    launched = [s for s in quickstart.steps("reports") if s.args[:2] == ("collect", "workload")
                and "--graph-only" not in s.args]
    assert len(launched) == 11 and not any("--repeats" in s.args for s in launched)
    run_id = _stored_run(store, local_platform, tiny_dlrm)
    store.close()
    quickstart._mark_done(workspace, "dlrm-ws1", 1.0, [run_id])
    quickstart._mark_done(workspace, "ops", 1.0, [])
    with Store.open(workspace, read_only=True) as reader:
        ids = quickstart.workload_run_ids(reader, [s.name for s in launched])
    assert ids == (run_id[:12],)
    assert main(["--home", str(workspace.home), "collect", "relaunch", *ids, "--min-launches", "3"]) == 0
    out = capsys.readouterr().out
    assert run_id[:12] in out and "added" in out and max(map(len, out.splitlines())) <= 80
    with Store.open(workspace, read_only=True) as reader:
        assert len(launch_medians(reader, run_id)[0]) == 2
