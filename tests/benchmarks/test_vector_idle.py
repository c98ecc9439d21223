"""benchmarks/vector_idle.py: a spin that lasts what it is asked, real op times after gaps and back to back after
one, the quickstart's bert step timed in both modes, the report's ratios, and a bad option refused in one line."""
import time

import pytest

from tests.harness import load_benchmark


def test_a_spin_lasts_at_least_what_it_is_asked():
    bench = load_benchmark("vector_idle")
    start = time.perf_counter_ns()
    bench.spin(2000)
    assert (time.perf_counter_ns() - start) / 1e3 >= 2000


def test_real_times_after_gaps_and_after_one_gap():
    bench = load_benchmark("vector_idle")
    add = bench.ops()["add 8x64x64"]
    medians = bench.after_gaps(add, (0, 100), reps=3)
    assert set(medians) == {0, 100} and all(0 < v < 1e5 for v in medians.values())
    series = bench.recovery(add, calls=4, rounds=2, gap_us=100)
    assert len(series) == 4 and all(0 < v < 1e5 for v in series)


def test_the_bert_step_in_both_modes_and_the_report():
    bench = load_benchmark("vector_idle")
    step = bench.in_step(4)
    assert set(step) == {"layer 0 up-projection", "layer 1 up-projection", "forward", "backward", "optimizer step"}
    assert all(set(modes) == {"train", "eval"} for modes in step.values())
    assert step["forward"]["train"] > step["layer 0 up-projection"]["train"]   # the forward holds the projection
    gaps = {"op": {g: 100.0 * (2 if g >= 800 else 1) for g in bench.GAPS_US}}
    text = bench.report(gaps, {"op": [300.0] + [100.0] * (bench.RECOVERY_CALLS - 1)},
                        {"forward": {"train": 300.0, "eval": 100.0}}, bench.datetime(2026, 1, 1), 3, 4)
    assert text.startswith("# An op right after scalar work") and "cores (lscpu)" in text
    assert "| op | 100 (x1.00) |" in text and "200 (x2.00) | 200 (x2.00) |" in text
    assert "| forward | 300 | 100 | x3.00 |" in text


def test_a_bad_option_is_one_line(capsys):
    bench = load_benchmark("vector_idle")
    assert bench.main(["--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--steps" in err


def test_scalar_work_after_each_kind_of_work_and_its_table():
    bench = load_benchmark("vector_idle")
    times = bench.scalar_after(2)
    assert set(times) == {"three 512³ GEMMs", "a 2 ms spin", "20 adds over 1 MiB"}
    assert all(0 < us < 1e6 for us in times.values())
    text = bench.report({}, {}, {}, bench.datetime(2026, 1, 1), 1, 2,
                        {"three 512³ GEMMs": 125.0, "a 2 ms spin": 100.0})
    assert "| three 512³ GEMMs | 125 | x1.25 |" in text and "| a 2 ms spin | 100 | x1.00 |" in text


def test_a_linear_after_each_kind_of_work_and_its_table():
    bench = load_benchmark("vector_idle")
    start = time.perf_counter_ns()
    bench.for_us(lambda: None, 500)
    assert (time.perf_counter_ns() - start) / 1e3 >= 500
    times = bench.kinds_before(1)
    assert list(times)[0] == "nothing (back to back)" and "256³ GEMMs" in times and "dropout" in times
    assert all(0 < us < 1e6 for us in times.values())
    text = bench.report({}, {}, {}, bench.datetime(2026, 1, 1), 1, 2,
                        kinds={"nothing (back to back)": 160.0, "a pure-Python spin": 480.0})
    assert f"## 5. The linear 512x64 -> 256 right after {bench.KIND_US} µs" in text
    assert "| a pure-Python spin | 480 | x3.00 |" in text and "| nothing (back to back) | 160 | x1.00 |" in text
