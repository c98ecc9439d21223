"""benchmarks/host_two_speeds.py: real window medians of a GEMM on this host, the two levels and the slow phases
read from a known series, and a bad option refused in one line."""
import pytest

from tests.harness import load_benchmark


def test_slow_phases_are_runs_of_consecutive_slow_windows():
    bench = load_benchmark("host_two_speeds")
    assert bench.slow_runs([False, True, True, False, True], 0.2) == pytest.approx([0.4, 0.2])
    assert bench.slow_runs([False, False], 0.2) == []
    assert bench.slow_runs([True, True, True], 0.5) == pytest.approx([1.5])   # a phase still running at the end


def test_a_two_level_series_gives_its_levels_and_phases():
    bench = load_benchmark("host_two_speeds")
    medians = [100.0] * 10 + [150.0] * 3 + [100.0] * 5 + [148.0] * 2   # 20 windows, 5 slow in two phases
    text = bench.report(medians, 0.2, bench.datetime(2026, 1, 1), 4.0)
    assert text.startswith("# Does this host run at two speeds?") and "cores (lscpu)" in text
    row = next(line for line in text.splitlines() if line.startswith("| 20 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "100.0"            # the fast level: the 10th percentile of the windows
    assert cells[2] == "25%"              # 5 of 20 windows above 1.25 x 100
    assert cells[3] == "150.0" and cells[4] == "1.50"   # the median of 150, 150, 150, 148, 148
    assert cells[5] == "2, 0.5, 0.6"      # two slow phases of 0.6 and 0.4 s
    steady = bench.report([100.0, 101.0, 99.0, 100.0], 0.2, bench.datetime(2026, 1, 1), 0.8)
    assert "| 4 | 99.3 | 0% | nan |" in steady   # no slow window: no slow level


def test_real_windows_of_one_gemm():
    bench = load_benchmark("host_two_speeds")
    medians = bench.window_medians(0.3, 0.1)
    assert len(medians) >= 2                       # 0.3 s of 0.1 s windows (the last may run over)
    assert all(1.0 < m < 1e5 for m in medians)     # a 256^3 GEMM takes between 1 µs and 0.1 s on any CPU


def test_a_bad_option_is_one_line(capsys):
    bench = load_benchmark("host_two_speeds")
    assert bench.main(["--window", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--window" in err
