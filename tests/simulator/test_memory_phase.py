"""simulator/memory_phase.py: a truth's memory pace against its prices', from the probes real runs store in their
summaries (a real store; the probes are the stages' own summary fields)."""
import json

import pytest

from collectors.memory_probe import PROBE_BYTES
from pmdb import platform as platforms
from pmdb.store import Store
from simulator.memory_phase import MemoryPace, memory_pace, read_times

PLATFORM = "pace-cpu"


def _probe(us: float, nbytes: int = PROBE_BYTES) -> dict:
    return {"bytes": nbytes, "read_us": us, "at": "2026-11-29T03:00:00+00:00"}


def _run(store, kind: str, probes: list[dict], *, fail: bool = False, platform: str = PLATFORM) -> str:
    from sim_store import probed_run

    return probed_run(store, kind, platform, probes, fail=fail)


def test_pace_is_the_ratio_of_medians_of_completed_runs(store):
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    platforms.ensure_named(store, "other-cpu", device_kind="cpu")
    _run(store, "ops", [_probe(3000.0), _probe(3200.0)])
    _run(store, "ops", [_probe(2800.0), _probe(3100.0), _probe(10.0, nbytes=2 ** 20)])  # another size: not counted
    _run(store, "ops", [_probe(90000.0)], fail=True)            # a failed run's probes do not count
    _run(store, "ops", [_probe(1.0)], platform="other-cpu")      # nor another platform's
    truth = _run(store, "workload", [_probe(4000.0), _probe(3900.0), _probe(4100.0)])
    pace = memory_pace(store, truth, PLATFORM)
    assert pace.truth_us == 4000.0 and pace.prices_us == pytest.approx(3050.0)
    assert (pace.truth_probes, pace.prices_probes) == (3, 4)
    assert pace.ratio == pytest.approx(4000.0 / 3050.0)
    assert pace.label() == "x1.31"
    assert "64 MiB read took 4.00 ms" in pace.sentence() and "3.05 ms" in pace.sentence()
    assert "may be the host's phase" in pace.sentence()                      # x1.31: a phase apart
    same = MemoryPace(3100.0, 3050.0, 2, 4)
    assert same.label() == "x1.02" and "the same phase at both" in same.sentence()


def test_no_probe_on_either_side_gives_none(store):
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    old = _run(store, "workload", [])
    assert memory_pace(store, old, PLATFORM) is None      # a run recorded before the probe existed
    truth = _run(store, "workload", [_probe(4000.0)])
    assert memory_pace(store, truth, PLATFORM) is None    # no ops run has a probe
    assert memory_pace(store, None, PLATFORM) is None


def test_summaries_without_probes_or_with_damaged_ones_read_as_none():
    assert read_times(None) == [] and read_times("not json") == [] and read_times({"memory_probe": "x"}) == []
    assert read_times(json.dumps({"memory_probe": [_probe(5.0), {"bytes": PROBE_BYTES, "read_us": -1}]})) == [5.0]


def test_a_cpu_prediction_carries_the_pace_into_predict_and_its_output(store, cpu_trace_files, capsys, monkeypatch):
    """The 2-rank CPU step recorded here, its truth and an ops run carrying real probes (the stages' summary field),
    predicted by `pmdb predict RUN`: the row memory_pace and the sentence, within 80 columns."""
    from sim_store import two_rank_truth

    from collectors.memory_probe import read_probe
    from collectors.wake_probe import read_wake
    from pmdb.cli.main import main
    from simulator.llc_found import probe_found
    from simulator.predict import predict_and_store

    platform = platforms.resolve(store, None)
    with store.run("ops", platform, {}) as run:
        run.summary = {"memory_probe": [read_probe(), read_probe()], "wake_probe": [read_wake(rounds=5)]}
    truth = two_rank_truth(store, platform, cpu_trace_files, "two-rank-pace",
                           [read_probe(curve=True), read_probe(curve=True), read_probe(curve=True)],
                           [read_wake(rounds=5), read_wake(rounds=5)])
    with store.run("predict", platform, {}) as run:
        _, pred = predict_and_store(store, run.run_id, workload_run_id=truth)
    stored = [json.loads(s)["memory_probe"] for s in store.query(
        "SELECT summary FROM collection_runs WHERE kind IN ('ops', 'workload') ORDER BY kind")["summary"]]
    prices, truths = ([p["read_us"] for p in probes] for probes in stored)
    assert pred.memory_pace.prices_us == pytest.approx(sorted(prices)[0] / 2 + sorted(prices)[1] / 2)
    assert pred.memory_pace.truth_us == sorted(truths)[1]
    home = str(store.workspace.home)
    store.close()
    monkeypatch.setenv("COLUMNS", "80")
    capsys.readouterr()                     # what the prediction above printed, unwrapped
    assert main(["--home", home, "predict", truth]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    row = next(line for line in out if line.startswith("memory_pace"))
    assert row.split()[-1] == pred.memory_pace.label()
    row = next(line for line in out if line.startswith("compute_pace"))
    assert row.split()[-1] == pred.compute_pace.label()
    text = " ".join(out)
    assert f"memory pace {pred.memory_pace.label()}: a 64 MiB read took" in text
    # and its compute pace, from the same runs' compute probes (simulator.compute_phase)
    assert pred.compute_pace.truth_probes == 2 and pred.compute_pace.prices_probes == 1
    assert f"compute pace {pred.compute_pace.label()}: a one-thread linear 512x64->256 took" in text
    assert all(len(line) <= 80 for line in out), [line for line in out if len(line) > 80]
    # the probes whose curve tells an LLC from memory (on a host whose LLC serves a process little, the 48 MiB-L3
    # Intel guest, a 16 MiB read may run at memory's pace: that probe tells nothing and is left out)
    usable = sum(probe_found(p.get("llc")) is not None for p in stored[1])
    assert (pred.llc_found is None) == (usable == 0)
    if pred.llc_found is not None:   # where this host's flush helper loads, the run's probes carry the LLC found
        assert pred.llc_found.source == "run" and pred.llc_found.probes == usable
        notes = " ".join(captured.err.split())                       # the notes go to stderr, wrapped
        assert f"ops priced by reuse distance in the LLC found by this run's {usable} memory probes" in notes
        assert all(len(line) <= 80 for line in captured.err.splitlines())
        assert main(["--home", home, "predict", truth, "--format", "json"]) == 0
        row = json.loads(capsys.readouterr().out)[0]
        assert row["compute_pace"] == round(pred.compute_pace.ratio, 4)
        assert row["llc_found_source"] == "run" and row["llc_found_64mib"] == round(pred.llc_found(PROBE_BYTES), 4)
        with Store.open(store.workspace, read_only=True) as again:
            recorded = json.loads(again.query("SELECT summary FROM collection_runs WHERE kind = 'predict' "
                                              "ORDER BY started_at DESC LIMIT 1")["summary"][0])
        assert recorded["llc_found"] == pred.llc_found.to_json()
    # `predict --all` of the run again (its prediction made stale): both paces are columns of its rows
    from simulator.semantics import RULES_VERSION

    with Store.open(store.workspace) as again:
        again.conn.execute("UPDATE predictions SET rules_version = ?", [RULES_VERSION - 1])
    assert main(["--home", home, "predict", "--all", "--format", "json"]) == 0
    rows = [r for r in json.loads(capsys.readouterr().out) if r["workload_run"] == truth]
    assert [(r["memory_pace"], r["compute_pace"]) for r in rows] == [
        (round(pred.memory_pace.ratio, 4), round(pred.compute_pace.ratio, 4))]


def test_the_named_query_gives_each_runs_pace_like_the_module(store):
    """`pmdb sql --query memory_pace` on known probes: the same medians and ratio as memory_pace(), a relaunch's
    probes counted with its run's (the query left them out before 2026-11-30); runs without probes, failed runs and
    probes of another size are left out."""
    from pathlib import Path

    from sim_store import probed_truth

    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    _run(store, "ops", [_probe(3000.0), _probe(3200.0), _probe(5.0, nbytes=2 ** 20)])
    _run(store, "ops", [_probe(90000.0)], fail=True)
    runs = {}
    for name, probes in (("paced", [_probe(4000.0), _probe(4400.0)]), ("unprobed", [])):
        runs[name] = probed_truth(store, PLATFORM, name, {"memory_probe": probes})
    with store.run("relaunch", PLATFORM, {"adds_to": runs["paced"]}) as run:   # its launches are part of its truth
        run.summary = {"memory_probe": [_probe(5000.0), _probe(5200.0)]}
    with store.run("relaunch", PLATFORM, {"adds_to": runs["unprobed"]}) as run:
        run.summary = {"memory_probe": []}
    query = (Path(__file__).resolve().parents[2] / "sql" / "queries" / "memory_pace.sql").read_text()
    rows = store.query(query)
    assert rows["workload"].tolist() == ["paced"]
    row = rows.iloc[0]
    expected = memory_pace(store, runs["paced"], PLATFORM)
    assert row["truth_read_ms"] == expected.truth_us / 1000 == 4.7          # its relaunch's probes counted
    assert row["prices_read_ms"] == expected.prices_us / 1000 == 3.1
    assert row["pace"] == round(expected.ratio, 3) and (row["truth_probes"], row["prices_probes"]) == (4, 2)
