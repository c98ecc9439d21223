"""simulator/compute_phase.py: a truth's compute pace against its prices', from the wake probes real runs store in
their summaries (a real store; the probes are the stages' own summary fields), and the summary's warning."""
import json

import pytest

from collectors.wake_probe import read_wake
from pmdb import platform as platforms
from simulator.compute_phase import ComputePace, compute_pace, frame_paces, pace_brief, pace_warning

PLATFORM = "pace-cpu"
OP = "linear 512x64->256"


def _probe(us: float, op: str = OP) -> dict:
    return {"at": "2026-11-30T22:00:00+00:00", "op": op, "spin_us": 2000.0, "rounds": 15,
            "back_to_back_us": us, "after_spin_us": [us] * 4, "lost_us": 0.0}


def _run(store, kind: str, probes: list[dict], *, fail: bool = False, platform: str = PLATFORM) -> str:
    from sim_store import probed_run

    return probed_run(store, kind, platform, probes, fail=fail, key="wake_probe")


def test_pace_is_the_ratio_of_medians_over_one_op_of_completed_runs(store):
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    platforms.ensure_named(store, "other-cpu", device_kind="cpu")
    _run(store, "ops", [_probe(200.0), _probe(220.0)])
    _run(store, "ops", [_probe(210.0), _probe(5.0, op="linear 8x8->8")])   # another op: not counted
    _run(store, "ops", [_probe(9000.0)], fail=True)                         # a failed run's probes do not count
    _run(store, "ops", [_probe(1.0)], platform="other-cpu")                 # nor another platform's
    truth = _run(store, "workload", [_probe(260.0), _probe(270.0), _probe(280.0, op="linear 8x8->8")])
    pace = compute_pace(store, truth, PLATFORM)
    assert (pace.op, pace.truth_us, pace.prices_us) == (OP, 265.0, 210.0)
    assert (pace.truth_probes, pace.prices_probes) == (2, 3)
    assert pace.label() == "x1.26" and not pace.same_phase
    assert "one-thread linear 512x64->256 took 265 µs" in pace.sentence() and "210 µs" in pace.sentence()
    assert "may be the host's phase" in pace.sentence()
    assert pace.to_json() == {"compute_truth_us": 265.0, "compute_prices_us": 210.0, "compute_pace": 1.2619}
    same = ComputePace(215.0, 210.0, 2, 3, OP)
    assert same.same_phase and "the same pace at both" in same.sentence()


def test_no_probe_on_either_side_gives_none(store):
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    old = _run(store, "workload", [])
    assert compute_pace(store, old, PLATFORM) is None        # a run recorded before the truth's probe existed
    truth = _run(store, "workload", [_probe(200.0)])
    assert compute_pace(store, truth, PLATFORM) is None      # no ops run has a probe
    _run(store, "ops", [_probe(200.0, op="linear 8x8->8")])
    assert compute_pace(store, truth, PLATFORM) is None      # the sweeps probed another op
    assert compute_pace(store, None, PLATFORM) is None
    with store.run("workload", PLATFORM, {}) as run:
        run.summary = {"wake_probe": [{"op": OP, "back_to_back_us": -1.0}, "x"]}   # damaged: read as none
    assert compute_pace(store, run.run_id, PLATFORM) is None


def test_real_probes_on_both_sides_give_a_pace(store):
    """Probes taken here on one thread, stored as the stages store them: the pace of the stored times (how far
    apart they are is this host's phase, which a test on a loaded machine must not assert)."""
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    ops = _run(store, "ops", [read_wake(rounds=5), read_wake(rounds=5)])
    truth = _run(store, "workload", [read_wake(rounds=5)])
    pace = compute_pace(store, truth, PLATFORM)
    assert pace is not None and pace.op == OP and pace.truth_probes == 1 and pace.prices_probes == 2
    stored = {run: [p["back_to_back_us"] for p in json.loads(store.scalar(
        "SELECT summary FROM collection_runs WHERE run_id = ?", [run]))["wake_probe"]] for run in (ops, truth)}
    assert pace.truth_us == stored[truth][0] > 0 and pace.prices_us == pytest.approx(sum(stored[ops]) / 2)
    assert pace.ratio == pytest.approx(pace.truth_us / pace.prices_us)


def test_the_warning_names_the_runs_off_their_prices_farthest_first():
    def pace(ratio: float) -> ComputePace:
        return ComputePace(200.0 * ratio, 200.0, 2, 4, OP)

    assert pace_warning([("bert ws1", pace(1.05)), ("gpt2 ws1", None)]) is None
    said = pace_warning([("bert ws1", pace(1.05)), ("gpt2 ws1", pace(1.2)), ("xlnet ws1", pace(0.7))])
    assert said.startswith("compute pace: a one-thread linear 512x64->256 took another time")
    assert "(xlnet ws1 x0.70, gpt2 ws1 x1.20)" in said and "bert" not in said
    many = pace_warning([(f"run{k}", pace(1.3 + k / 100)) for k in range(5)])
    assert "(run4 x1.34, run3 x1.33, run2 x1.32 and 2 more)" in many



def test_the_named_query_gives_each_runs_pace_like_the_module(store):
    """`pmdb sql --query compute_pace` on known probes: the same medians and ratio as compute_pace(), a relaunch's
    probes counted with its run's; runs without probes, failed runs and probes of another op are left out."""
    from pathlib import Path

    from sim_store import probed_truth

    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    _run(store, "ops", [_probe(200.0), _probe(220.0), _probe(5.0, op="linear 8x8->8")])
    _run(store, "ops", [_probe(9000.0)], fail=True)
    runs = {}
    for name, probes in (("paced", [_probe(250.0), _probe(260.0)]), ("unprobed", [])):
        runs[name] = probed_truth(store, PLATFORM, name, {"wake_probe": probes})
    with store.run("relaunch", PLATFORM, {"adds_to": runs["paced"]}) as run:   # its launches are part of its truth
        run.summary = {"wake_probe": [_probe(300.0), _probe(310.0)]}
    with store.run("relaunch", PLATFORM, {"adds_to": runs["unprobed"]}) as run:
        run.summary = {"wake_probe": []}
    query = (Path(__file__).resolve().parents[2] / "sql" / "queries" / "compute_pace.sql").read_text()
    rows = store.query(query)
    assert rows["workload"].tolist() == ["paced"]
    row = rows.iloc[0]
    expected = compute_pace(store, runs["paced"], PLATFORM)
    assert row["truth_us"] == expected.truth_us == 280.0                   # its relaunch's probes counted
    assert row["prices_us"] == expected.prices_us == 210.0
    assert row["pace"] == round(expected.ratio, 3) and (row["truth_probes"], row["prices_probes"]) == (4, 2)


def test_the_brief_form_is_one_summary_line():
    def pace(ratio: float) -> ComputePace:
        return ComputePace(200.0 * ratio, 200.0, 2, 4, OP)

    assert pace_brief([("bert ws1", pace(1.05))]) is None
    one = pace_brief([("bert ws1", pace(1.25)), ("gpt2 ws1", pace(1.02))])
    assert one == "compute pace x1.25 at 1 truth vs the op sweeps: maybe the host's phase"
    many = pace_brief([(f"run{k}", pace(r)) for k, r in enumerate((1.12, 1.24, 0.85, 1.0))])
    assert many == "compute pace x0.85-1.24 at 3 truths vs the op sweeps: maybe the host's phase"
    assert len("! " + many) <= 80


def test_a_report_frame_paces_only_truths_measured_on_its_platform(store):
    """report.sections' frame: a run predicted for the platform it was measured on gets its pace; the same run
    predicted for another platform, and a row without a run, get none."""
    import pandas as pd
    from sim_store import probed_truth

    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    _run(store, "ops", [_probe(200.0)])
    truth = probed_truth(store, PLATFORM, "w", {"wake_probe": [_probe(300.0)]})
    frame = pd.DataFrame({"label": ["here", "elsewhere", "imported"],
                          "workload_run_id": [truth, truth, None],
                          "platform": [PLATFORM, "other-cpu", PLATFORM]})
    paces = frame_paces(store, frame)
    assert paces[0].ratio == 1.5 and paces[1:] == [None, None]
    assert "(here x1.50)" in pace_warning(list(zip(frame["label"], paces)))
