"""The report keeps platforms apart: a 270 ms GPU step and 1 ms CPU steps get a panel (own time axis, own geomean)
each in Fig. 10/11 and Fig. 2; sections without data read "not run yet: <command>"; the kernel table names each
model by its registered name; `pmdb report` prints its warnings and the whole commands it advises."""
from __future__ import annotations

import re

from pmdb import platform as platforms
from pmdb.cli.main import main
from report.build import build_report
from report.figures import series_of
from report.page import not_run_yet
from simulator.cross_gpu_range import SpecRange
from simulator.engine import TimedOp, simulate
from simulator.semantics import COMPUTE, SyncHost
from simulator.store_rows import Prediction, store_prediction
from tests.report.test_report import PLATFORM, small_store, small_store_template  # noqa: F401  (fixtures)

GPU = "report-gpu"


def _gpu_prediction(store, spec_range: SpecRange | None = None, summary: dict | None = None) -> int:
    """A 270 ms step of a GPU platform, predicted at 280 ms (with a spec-only range when given; ``summary``: the
    workload run's, as collect workload stores it)."""
    platforms.ensure_named(store, GPU, device_kind="cuda")
    result = simulate([[TimedOp(kernels=((COMPUTE, 270_000.0, 0.0, 0.0),))]], SyncHost())
    with store.run("workload", GPU, {}) as run:
        wid = store.insert_one("workloads", {"family": "transformer", "name": "bert-large", "config": {},
                                             "config_hash": "bert-large-gpu", "batch_size": 2, "world_size": 1},
                               returning="workload_id")
        store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": wid, "platform": GPU,
                                           "iterations": 5, "warmup": 1, "measured_us": 270_000.0})
        if summary:
            run.summary = summary
    truth = run.run_id
    with store.run("predict", GPU, {}) as run:
        ts = store.insert_one("trace_sets", {"run_id": run.run_id, "platform": GPU, "label": "bert-large",
                                             "workload_id": wid, "world_size": 1, "source": "derived"},
                              returning="trace_set_id")
        return store_prediction(store, run.run_id, Prediction(
            trace_set_id=ts, mode="model", source_platform=GPU, target_platform=GPU, result=result,
            predicted_us=280_000.0, measured_us=270_000.0, workload_run_id=truth, spec_range=spec_range))


def test_a_gpu_step_and_cpu_steps_get_a_panel_each(small_store, tmp_path):
    store, _ = small_store
    _gpu_prediction(store)
    made = build_report(store, tmp_path / "out")
    bars = series_of(tmp_path / "out" / "predicted_vs_measured_model.png")
    assert len(bars) == 3  # dlrm and transformer on the CPU, transformer on the GPU: no blended geomean
    assert any(t.startswith(f"transformer on {GPU}: geomean |e| 3.7% over 1 runs") for t in bars), bars
    assert sum(f"on {PLATFORM}" in t for t in bars) == 2
    streams = series_of(tmp_path / "out" / "stream_breakdown_model.png")
    assert [t.split(":")[0] for t in streams] == [PLATFORM, GPU]
    kernels = made.page.read_text().split("<section id='kernel_models'>")[1].split("</section>")[0]
    assert f"<td>pmdb.{PLATFORM}.fully_connected.fwd.cold</td>" in kernels


def test_a_spec_only_range_is_a_column_of_the_run_table(small_store, tmp_path):
    store, _ = small_store
    _gpu_prediction(store, SpecRange({"p4": 390_000.0, "v100": 230_000.0}, 0.9))
    made = build_report(store, tmp_path / "out")
    predictions = made.page.read_text().split("<section id='predictions'>")[1].split("</section>")[0]
    assert "<th>spec-only range ms</th>" in predictions
    assert "<td>230-390</td>" in predictions                  # the lowest and highest held-out GPU's step
    assert predictions.count("<td></td>") >= 2                # the CPU runs have none


def test_the_run_table_shows_each_truths_paces_and_names_a_phase_apart(small_store, tmp_path):
    """A run whose truth and op sweeps carry probes: its memory and compute pace are columns of the run table (runs
    without probes empty), and its compute pace beyond 10% is a warning of the section naming it."""
    store, _ = small_store

    def wake(us: float) -> dict:
        return {"at": "2026-11-30T22:00:00+00:00", "op": "linear 512x64->256", "spin_us": 2000.0, "rounds": 15,
                "back_to_back_us": us, "after_spin_us": [us] * 4, "lost_us": 0.0}

    def read(us: float) -> dict:
        return {"bytes": 64 * 2 ** 20, "read_us": us, "at": "2026-11-30T22:00:00+00:00"}

    platforms.ensure_named(store, GPU, device_kind="cuda")
    with store.run("ops", GPU, {}) as run:
        run.summary = {"memory_probe": [read(3000.0)], "wake_probe": [wake(200.0)]}
    _gpu_prediction(store, summary={"memory_probe": [read(3300.0)], "wake_probe": [wake(260.0), wake(240.0)]})
    made = build_report(store, tmp_path / "out")
    predictions = made.page.read_text().split("<section id='predictions'>")[1].split("</section>")[0]
    assert "<th>memory pace</th>" in predictions and "<th>compute pace</th>" in predictions
    assert "<td>x1.10</td><td>x1.25</td>" in predictions
    assert "within x0.90-1.10 the host was in one phase" in predictions
    assert re.search(r"compute pace: a one-thread linear 512x64-&gt;256 took another time at the truth than at "
                     r"the op sweeps \(bert-large b2 ws1 @report-gpu x1.25\)", predictions), predictions


def test_sections_without_data_say_not_run_yet_with_the_command():
    assert not_run_yet("no sharding studies: run `pmdb shard --study`") == \
        "not run yet: `pmdb shard --study` (no sharding studies)"
    assert not_run_yet("measured points only") == "not run yet: measured points only"


def test_cli_report_prints_warnings_and_whole_commands(small_store, capsys, monkeypatch):
    store, _ = small_store
    home = str(store.workspace.home)
    store.close()
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["--home", home, "report"]) == 0
    out = capsys.readouterr().out
    wide = [line for line in out.splitlines() if len(line) > 80 and len(line.split()) > 1]
    assert not wide, wide  # only a lone word (the tmp folder's long path) is never broken
    joined = " ".join(out.split())  # the wrapped lines read back as one text
    assert "predictions: warning: " in joined and "plans are indistinguishable to the model" in joined
    planner = re.search(r"planner: not run yet: (`pmdb plan sweep [^`]*`)", joined)
    assert planner and "…" not in planner.group(1)
