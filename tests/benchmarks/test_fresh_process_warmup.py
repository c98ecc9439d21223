"""benchmarks/fresh_process_warmup.py: the workload arguments it collects with (no warm-up, its own counts, no
traces), the step ranges and their ratios to the steady half computed from known iterations, a run's stored
iterations split per launch, a real trainer's phases timed with its zero share falling, and bad options refused in
one line."""
import pytest

from tests.harness import load_benchmark


def test_the_quickstart_arguments_get_its_counts_and_no_traces():
    bench = load_benchmark("fresh_process_warmup")
    args = ("collect", "workload", "transformer", "--arch", "bert", "--iters", "20", "--warmup", "5",
            "--trace-iters", "3", "--batch-size", "8")
    out = bench.with_counts(args, 400, 4)
    assert out == ("collect", "workload", "transformer", "--arch", "bert", "--batch-size", "8", "--iters", "400",
                   "--warmup", "0", "--repeats", "4", "--no-trace")


def test_ranges_ratios_and_launches_from_known_iterations():
    bench = load_benchmark("fresh_process_warmup")
    assert bench.ranges(400) == [(5, 25), (25, 50), (50, 100), (100, 200)]
    assert bench.ranges(60) == [(5, 25), (25, 30)]
    # steps 0-29 at 2.0 ms then 1.0 ms: the steady half (30-59) is 1.0, steps 5-24 twice it
    times = [2000.0] * 30 + [1000.0] * 30
    assert bench.settling(times, 60) == pytest.approx([2.0, 2.0])
    split = bench.launches(times + [500.0] * 60, 60)
    assert len(split) == 2 and split[1] == [500.0] * 60
    lines = bench.table({"bert ws1": [times, [1000.0] * 60]}, 60, {"bert ws1": 0.25})
    assert lines[2].startswith("| bert ws1 | 2 | 1.500 (1.00-2.00) |")
    assert lines[2].endswith("| 1.00 / 1.00 | 0.250 |")


def test_a_real_trainer_phases_with_its_zero_share_falling():
    bench = load_benchmark("fresh_process_warmup")
    config = {"arch": "bert", "layers": 1, "hidden": 32, "heads": 2, "seq_len": 16}
    times, zeros = bench.phase_times("transformer", config, 2, 8)
    assert set(times) == {"forward", "backward", "optimizer"}
    assert all(len(v) == 8 and min(v) > 0 for v in times.values())
    assert zeros[0] is None                       # no optimizer state before the first step
    assert 0.0 < zeros[-1] < zeros[1] <= 1.0       # token rows leave zero as batches reach them


@pytest.mark.parametrize("argv", [["--repeats", "0"], ["--iters", "10"], ["--workload", "nope-ws1"]])
def test_bad_options_are_refused_in_one_line(argv, capsys):
    bench = load_benchmark("fresh_process_warmup")
    assert bench.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fresh_process_warmup: ")
