"""benchmarks/host_phase.py: windows of a real training step and real probes on this host, their summary computed
from the windows, and a bad option refused in one line."""
import math

import numpy as np
import pytest

from tests.harness import load_benchmark


def test_rank_correlation_of_known_series():
    bench = load_benchmark("host_phase")
    a = np.array([1.0, 2.0, 3.0, 4.0])
    assert bench.spearman(a, a * 10 + 1) == pytest.approx(1.0)
    assert bench.spearman(a, -a) == pytest.approx(-1.0)
    assert bench.ranks(np.array([5.0, 1.0, 5.0])).tolist() == [1.5, 0.0, 1.5]   # ties share their mean rank
    assert math.isnan(bench.spearman(a[:2], a[:2]))   # under three windows: no correlation
    assert math.isnan(bench.spearman(a, np.ones(4)))


def test_two_windows_of_the_dlrm_step_and_their_summary():
    bench = load_benchmark("host_phase")
    # measure() and report() as main() calls them, without main's process-wide settings (mallopt, one thread),
    # which would outlive this test in its worker
    args = bench.argparse.Namespace(workload="dlrm", minutes=0.0, steps=2, reps=3, reads=2, pause=0.0)
    rows = bench.measure("dlrm", 0.0, 2, 3, 2, 0.0, log=lambda line: None)
    text = bench.report(rows, args, "2026-01-01 00:00")
    assert text.startswith("# The host's pace over minutes (dlrm)")
    assert "Host: " in text and "cores (lscpu)" in text
    windows = [line for line in text.splitlines() if line.startswith("| ") and line[2:4].isdigit()]
    assert len(windows) == 2   # --minutes 0 still measures two windows
    steps = [float(line.split("|")[2]) for line in windows]
    assert all(s > 100 for s in steps)   # a DLRM step of batch 256 takes more than 100 µs on any CPU
    summary = next(line for line in text.splitlines() if line.startswith("| step |"))
    cells = [c.strip() for c in summary.split("|")]
    assert float(cells[3]) == pytest.approx(min(steps), abs=0.06)
    assert float(cells[4]) == pytest.approx(max(steps), abs=0.06)
    assert cells[5] == f"x{max(steps) / min(steps):.2f}"
    assert "n/a" in text   # two windows give no rank correlation


def test_a_bad_option_is_one_line(capsys):
    bench = load_benchmark("host_phase")
    assert bench.main(["--steps", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "at least 1" in err
