"""The profiler-tax calibration on real profiled loops: samples cut as the CPU overheads are, events counted, and the
profiler configured as the Kineto pass records slower than no profiler."""
from __future__ import annotations

import pytest
import torch

from collectors.workloads.profile import kineto_profiler
from collectors.workloads.profiler_tax import T1_MAX_US, _top, measure_case, rebuilt_us, samples


def _linear_events(calls: int = 20):
    x, w = torch.randn(8, 32), torch.randn(32, 32)
    with kineto_profiler() as prof:
        for _ in range(calls):
            torch.nn.functional.linear(x, w)
    return list(prof.events())


def test_samples_tile_the_profiled_span_as_the_overheads_cut_it():
    events = _linear_events()
    groups = samples(events)
    tops = sorted((e for e in events if _top(e)), key=lambda e: e.time_range.start)
    assert [e.name for e in tops] == ["aten::linear"] * 20
    gaps = [b.time_range.start - a.time_range.end for a, b in zip(tops, tops[1:])]
    long = [gap for gap in gaps if gap >= T1_MAX_US]   # a stall of a loaded host (a CI run had one): not a T1
    assert len(long) <= 9
    assert len(groups[("aten::linear", "T1")]) == 19 - len(long)   # a gap before every top-level op but the first
    assert len(groups[("aten::linear", "T2")]) == 20 and len(groups[("aten::linear", "T3")]) == 20
    leaves = {name for (name, kind), values in groups.items() if kind == "T5" and not
              any(e.name == name and e.cpu_children for e in events)}
    assert leaves and "aten::linear" not in leaves
    # op = T2 + children + T5 gaps + T3 and a leaf = its T5: the raw samples add up to the span of the top-level
    # ops (their durations plus the T1 gaps between them, less any stall over T1_MAX_US), exactly
    span = tops[-1].time_range.end - tops[0].time_range.start - sum(long)
    assert sum(sum(v) for v in groups.values()) == pytest.approx(span, rel=1e-9, abs=1e-6)
    assert 0 < rebuilt_us(groups) <= span * 1.5


def test_measure_case_counts_the_recorded_events_and_the_profilers_cost():
    x, w = torch.randn(8, 32), torch.randn(32, 32)
    case = measure_case("linear", lambda: torch.nn.functional.linear(x, w), 40, blocks=7)
    assert case.events_per_call >= 2 and case.events_per_call == int(case.events_per_call)
    assert case.unprofiled_us > 0 and case.tax_q25_us <= case.tax_q75_us
    # the sign of a linear's tax is within a loaded host's noise (0.0-0.9 µs an event): a one-element add's
    # recording costs more than its work, so its profiled blocks are slower by far whatever the load
    one = torch.ones(1)
    tiny = measure_case("add", lambda: torch.add(one, one), 200, blocks=9)
    assert tiny.profiled_us > tiny.unprofiled_us > 0
    assert tiny.tax_us > 0
    assert case.kept_us is not None and case.kept_tax_us is not None
    mixed = measure_case("mixed", lambda: torch.nn.functional.linear(x, w), 5, blocks=2, uniform=False)
    assert mixed.kept_us is None and mixed.kept_tax_us is None
