"""benchmarks/llc_found_repricing.py: one real 2-rank CPU step, its truth and real probes, priced the three ways the
benchmark compares (the old cold default, LRU reuse over the sysfs LLC, reuse in the LLC the run found)."""
from __future__ import annotations

import pytest

from harness import load_benchmark


@pytest.mark.slow
def test_the_three_pricings_of_a_run_and_the_table(store, cpu_trace_files, capsys, monkeypatch, tmp_path):
    from sim_store import telling_probes, two_rank_truth, warm_and_cold_linear

    from pmdb import platform as platforms
    from simulator.predict import predict_trace_set

    bench = load_benchmark("llc_found_repricing")
    platform = platforms.resolve(store, None)
    two_rank_truth(store, platform, cpu_trace_files, "two-rank-llc", telling_probes(2))
    warm_and_cold_linear(store, platform)

    runs = store.query(bench.RUNS).to_dict("records")
    assert [(r["workload"], r["world_size"]) for r in runs] == [("two_rank_step", 2)]
    run = runs[0]
    ways = {way: bench.price(store, run, way) for way in ("cold", "lru", "found")}
    # 'found' is the default as it stands; 'cold' the default without a curve: every linear priced cold, so slower
    default = predict_trace_set(store, int(run["trace_set_id"]), workload_run_id=run["run_id"]).predicted_us
    assert ways["found"] == pytest.approx(default, rel=1e-9)
    assert ways["cold"] > ways["found"] and ways["cold"] > ways["lru"]
    assert predict_trace_set(store, int(run["trace_set_id"]), workload_run_id=run["run_id"]).predicted_us == \
        pytest.approx(default, rel=1e-9)        # the benchmark puts back what it swapped for 'cold' and 'lru'
    home = store.workspace.home
    store.close()
    out = tmp_path / "repricing.md"
    monkeypatch.setattr("sys.argv", ["llc_found_repricing.py", str(home), "--out", str(out)])
    bench.main()
    text = out.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| two_rank_step | 2 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "12.35" and cells[3].startswith("run: 100/")     # the truth, and the run's own curve
    assert [float(c) for c in cells[4:]] == pytest.approx(
        [100 * (ways[w] / 12345.0 - 1) for w in ("cold", "lru", "found")], abs=0.051)
    assert "| two_rank_step ws2 | 1 |" in text and "cores (lscpu)" in text   # the group line; the host named
