"""benchmarks/truth_repeat.py --from: the collections a real workspace stores, written by the collector's own writer,
read back with their truths and iterations; the estimator table computed from known iterations; a workspace that is
not one refused in one line."""
import pytest

from tests.harness import load_benchmark


def _collect(store, platform: str, launches_ms: list[list[float]]) -> None:
    """One completed workload run of a 2-layer bert at world size 1 with these launches' iteration times (ms), stored
    as `pmdb collect workload` stores them (collectors.workloads.store_rows)."""
    from collectors.workloads.store_rows import ensure_workload, write_ground_truth

    workload = ensure_workload(store, family="transformer", name="bert", config={"arch": "bert", "layers": 2},
                               batch_size=8, world_size=1)
    launches = [[{"rank": 0, "times_us": [t * 1e3 for t in times]}] for times in launches_ms]
    with store.run("workload", platform, {"arch": "bert"}) as run:
        run.summary.update(write_ground_truth(
            store, run_id=run.run_id, workload_id=workload, platform=platform, iterations=len(launches_ms[0]),
            warmup=1, threads=1, allocator={}, results=launches[0], repeats=launches[1:]))


def test_stored_collections_read_back_with_their_truths(workspace, capsys):
    from pmdb.platform import register_local
    from pmdb.store import Store

    bench = load_benchmark("truth_repeat")
    with Store.open(workspace) as store:
        platform = register_local(store)["name"]
        _collect(store, platform, [[10.0, 11.0, 12.0], [20.0, 21.0, 22.0], [14.0, 30.0, 15.0]])
        _collect(store, platform, [[8.0, 8.0, 9.0]])
    rows = bench.stored_collections(workspace.home, [])
    assert list(rows) == ["bert ws1"]
    (first, first_times), (second, second_times) = rows["bert ws1"]
    assert first == pytest.approx(15e3)   # the median of the launch medians 11, 21 and 15 ms
    assert first_times == pytest.approx([t * 1e3 for t in (10, 11, 12, 20, 21, 22, 14, 30, 15)])   # launch order
    assert second == pytest.approx(8e3) and len(second_times) == 3
    assert bench.main(["--from", str(workspace.home)]) == 0
    out = capsys.readouterr().out
    assert "| bert ws1 | 15.00 / 8.00 | 11.50 |" in out     # the truths in order and their median
    assert "| bert ws1 | 2 | 61% |" in out                  # (15 - 8) / 11.5


def test_the_estimators_of_known_iterations():
    bench = load_benchmark("truth_repeat")
    fast, mixed = [10.0] * 9 + [20.0], [10.0] * 5 + [20.0] * 5   # µs: one slow iteration in ten, then half
    row = bench.estimator_row("x", [10.0, 15.0], [fast, mixed])
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == ["x", "2", "40%"]        # truths 10 and 15: (15 - 10) / 12.5
    assert cells[3] == "0.01 / 0.01"             # both 10th percentiles are the fast level (ms)
    assert cells[4] == "0%" and cells[5] == "0%"
    assert cells[6] == "10%-50%"                 # iterations above 1.25 x the 10th percentile


def test_a_folder_that_is_no_workspace_is_one_line(tmp_path, capsys):
    bench = load_benchmark("truth_repeat")
    assert bench.main(["--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no pmdb workspace" in err
