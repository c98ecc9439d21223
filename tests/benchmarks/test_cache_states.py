"""benchmarks/cache_states.py: the read-rate probe and the three cache states run on this host, and a bad option is
refused in one line."""
import numpy as np

from tests.harness import load_benchmark


def test_three_states_of_one_shape_are_timed_and_cold_is_not_cheaper_than_warm():
    bench = load_benchmark("cache_states")
    from collectors.ops.timer import CacheFlusher

    stream = np.ones(2 ** 20, dtype=np.float32)
    # 15 alternated repetitions: with 5, one preempted stretch on a loaded 2-core host made a warm median 4x cold
    times = bench.three_states(bench.SHAPES["dlrm addmm 256x512 -> 64"], CacheFlusher(), stream, reps=15)
    assert set(times) == {"warm", "llc", "cold"}
    assert all(t > 0 for t in times.values())
    assert times["cold"] > 0.8 * times["warm"]   # a flushed operand is never markedly faster than a cached one


def test_read_rate_is_a_rate():
    bench = load_benchmark("cache_states")
    assert 0.1 < bench.read_rate(0.5, budget_mib=4) < 10_000   # GB/s


def test_too_few_repetitions_are_refused(capsys):
    bench = load_benchmark("cache_states")
    assert bench.main(["--reps", "1"]) == 2
    assert "at least 3" in capsys.readouterr().err


def test_a_backward_call_costs_more_alone_than_as_a_node_of_a_chain():
    bench = load_benchmark("cache_states")
    cost = bench.backward_call_cost(4, reps=30, chain=20)
    assert cost["single"] > cost["direct"] > 0
    assert cost["call"] == cost["single"] - cost["in_chain"]
    assert cost["call"] > 0   # the engine's per-call work, paid once per backward in a step


def test_an_op_cycled_through_operand_sets_is_timed_per_working_set():
    bench = load_benchmark("cache_states")
    from collectors.ops.timer import CacheFlusher

    sizes = (2 ** 20, 4 * 2 ** 20)
    stream = np.ones(2 ** 20, dtype=np.float32)
    states, size, cycled = bench.at_distance(bench.AT_DISTANCE["add 1024x128"], CacheFlusher(), stream, reps=5,
                                             working_sets=sizes)
    assert size == 3 * 1024 * 128 * 4   # two operands and the output, float32
    assert set(states) == {"warm", "cold"} and all(t > 0 for t in states.values())
    assert list(cycled) == list(sizes) and all(t > 0 for t in cycled.values())
