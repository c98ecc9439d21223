"""simulator/code_away.py: what a forward call pays for its code path away, from the op sweeps' timings after other
work, and its price in reuse pricing (a real CPU trace set)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from simulator.code_away import CodeAway, entry_penalties, from_summaries


def _entry(warm: float, after: list[float], waits: list[float] | None = None) -> dict:
    return {"warm_us": warm, "waits_us": waits or [500, 2000, 8000], "after_us": after}


def test_the_penalty_is_the_time_after_a_wait_less_the_warm_time():
    assert entry_penalties(_entry(25.0, [44.0, 73.0, 159.0])) == ((500.0, 2000.0, 8000.0), (19.0, 48.0, 134.0))
    assert entry_penalties(_entry(25.0, [20.0, 73.0, 159.0]))[1][0] == 0.0      # faster than warm: none, not < 0
    for bad in (None, "x", _entry(1.0, [1.0, 2.0]), _entry(1.0, [1, 2, 3], [0, 1, 2]),
                _entry(1.0, [1, 2, 3], [5, 2, 9]), {**_entry(1.0, [1, 2, 3]), "warm_us": "x"},
                _entry(1.0, ["a", 2, 3]), _entry(float("nan"), [1, 2, 3])):
        assert entry_penalties(bad) is None


def test_the_curve_is_the_median_over_sweeps_and_interpolates_from_zero():
    sweeps = [json.dumps({"code_away": {"gelu/torch": _entry(25.0, [44.0, 73.0, 159.0]),
                                        "add/torch": _entry(9.0, [19.0, 29.0, 49.0])}}),
              {"code_away": {"gelu/torch": _entry(25.0, [35.0, 65.0, 125.0])}},
              {"code_away": {"gelu/torch": _entry(25.0, [55.0, 85.0, 165.0])}},
              {"code_away": "x"}, "not json", None, {"memory_probe": []}]
    away = from_summaries(sweeps)
    assert away.sweeps == 3 and away.waits_us == (500.0, 2000.0, 8000.0)
    assert away.penalties == {"gelu/torch": (19.0, 48.0, 134.0), "add/torch": (10.0, 20.0, 40.0)}
    assert away("gelu", "torch", 250.0) == pytest.approx(9.5)          # half of 0.5 ms: half of its penalty
    assert away("gelu", "torch", 1250.0) == pytest.approx(33.5)
    assert away("gelu", "torch", 1e6) == 134.0                         # beyond the longest wait: the longest's
    assert away("gelu", "mkldnn", 1e3) == 0.0 and away("relu", "torch", 1e3) == 0.0   # not timed: nothing
    assert away("gelu", None, 1e6) == 134.0          # a traced op names no implementation: its 'torch' curve
    assert away("gelu", "torch", 0.0) == 0.0 and away("gelu", "torch", float("nan")) == 0.0
    assert away.label() == "2 ops, median 14 / 34 / 87 µs after 0.5 / 2 / 8 ms"
    assert from_summaries([{"code_away": {}}, {"memory_probe": []}]) is None   # sweeps before it existed


@pytest.mark.slow
def test_reuse_pricing_adds_each_forward_call_s_code_away_at_the_time_since_its_op_last_ran(cpu_trace_set):
    """A real CPU trace (two ranks): every priced forward call gets its op's penalty at the traced µs since the
    previous forward call of that op on its rank ended; backward calls and other ops get nothing."""
    from fitters.roofline import uncalibrated
    from pmdb.traces.from_store import load_graphs
    from simulator.llc_found import LlcFound
    from simulator.model_set import ModelRef, ModelSelection, ModelSet, Overheads
    from simulator.timing import ModelTiming

    store, ts, platform = cpu_trace_set
    graph = load_graphs(store, ts, pick="best", detail=True, reuse=True)[0]
    found = LlcFound((2 ** 20, 2 ** 21), (1.0, 1.0), 1, "run", 2 ** 41)
    away = CodeAway((500.0, 2000.0), {"fully_connected/torch": (100.0, 200.0)}, 1)
    key = ("fully_connected", "fwd", "torch")
    models = ModelSet(
        kernels={key: ModelRef("fc.cold", 1, uncalibrated(*key[:2], "float32", {"gemm_flops": 5e9, "mem_bw": 1e9}),
                               "roofline")},
        warm={key: ModelRef("fc.warm", 1, uncalibrated(*key[:2], "float32", {"gemm_flops": 5e10, "mem_bw": 1e10}),
                            "roofline")},
        peaks={"gemm_flops": 5e10, "mem_bw": 1e10}, selection=ModelSelection("champion", "reuse", "0" * 8))

    def priced(llc_found):
        timing = ModelTiming(models, Overheads.latest(store, platform), "sync_host",
                             cache_bytes=(2 ** 40, 2 ** 41), llc_found=llc_found)
        timing.programs(graph)
        return timing, dict(timing._time)

    plain_timing, plain = priced(found)
    timing, added = priced(found.with_code_away(away))
    ops = graph.ranks[0].ops
    linears = sorted((op for op in ops if op.name == "aten::linear"), key=lambda op: op.start_us)
    assert len(linears) >= 2
    diffs = np.array([added[id(op)] - plain[id(op)] for op in linears])
    assert np.all(diffs > 0) and np.all(diffs <= 200.0 + 1e-9)
    # the second linear's penalty: the traced µs since the first one ended, on the curve from 0
    since = linears[1].start_us - (linears[0].start_us + linears[0].cpu_dur_us)
    assert diffs[1] == pytest.approx(away("fully_connected", None, since))
    # nothing else moves: the other ops' prices are the same
    others = [k for k in plain if k not in {id(op) for op in linears}]
    names: dict[int, str] = {}
    todo = [op for rg in graph.ranks for op in rg.ops]
    while todo:
        op = todo.pop()
        names[id(op)] = f"{op.name} {op.phase}"
        todo += op.sub
    moved = {names[k] for k in others if added[k] != plain[k]}
    assert moved <= {"aten::linear fw", "aten::mm fw"}     # the other forward GEMMs, on both ranks: fully_connected
    assert any(names[k].endswith(" bw") for k in others if added[k] == plain[k])   # backward calls: none
    assert timing.code_away is away and plain_timing.code_away is None
