"""simulator/llc_found.py: the LLC a run found, from its probes' reads against the DRAM pace (a real store; the
probes are the stages' own summary fields)."""
import json

import pytest

from pmdb import platform as platforms
from simulator.llc_found import LlcFound, from_summaries, probe_found, run_llc_found

MiB = 2 ** 20
PLATFORM = "found-cpu"


def _llc(t16: float, t64: float, t256: float, flushed: float = 5000.0) -> dict:
    """A probe's "llc" entry: touched reads of 16/64/256 MiB and the flushed 64 MiB read (µs)."""
    return {"sizes": [16 * MiB, 64 * MiB, 256 * MiB], "reads_us": [t16, t64, t256], "flushed_bytes": 64 * MiB,
            "flushed_us": flushed}


def _probe(llc: dict | None) -> dict:
    out = {"bytes": 64 * MiB, "read_us": 3000.0, "at": "2026-11-29T05:00:00+00:00"}
    if llc is not None:
        out["llc"] = llc
    return out


def test_found_is_the_share_read_at_llc_rather_than_dram_pace():
    # LLC pace 2500 µs per 64 MiB (625 per 16), DRAM pace 5000: 64 MiB in 3000 is 80% found, 256 MiB at DRAM pace 0%
    found = probe_found(_llc(625.0, 3000.0, 20000.0))
    assert found == pytest.approx({16 * MiB: 1.0, 64 * MiB: 0.8, 256 * MiB: 0.0})
    assert probe_found(_llc(625.0, 6000.0, 30000.0))[64 * MiB] == 0.0          # slower than DRAM: none, not < 0
    assert probe_found(_llc(1300.0, 3000.0, 20000.0)) is None                  # LLC no faster than DRAM: no curve
    for bad in (None, "x", {"sizes": [1], "reads_us": [1.0], "flushed_us": 1.0}, {**_llc(1, 2, 3), "flushed_us": 0},
                {**_llc(1, 2, 3), "reads_us": [1.0, "x", 2.0]}, {**_llc(1, 2, 3), "sizes": [0, 1, 2]},
                {**_llc(1, 2, 3), "flushed_bytes": "x"}, {**_llc(1, 2, 3), "flushed_bytes": 0}):
        assert probe_found(bad) is None


def test_the_curve_interpolates_on_log_size_and_ends_at_the_sysfs_llc():
    curve = LlcFound((16 * MiB, 64 * MiB, 256 * MiB), (1.0, 0.8, 0.0), 3, "run", 480 * MiB)
    assert curve(MiB) == 1.0 and curve(16 * MiB) == 1.0
    assert curve(32 * MiB) == pytest.approx(0.9) and curve(128 * MiB) == pytest.approx(0.4)
    assert curve(400 * MiB) == 0.0 and curve(500 * MiB) == 0.0
    wide = LlcFound((16 * MiB, 64 * MiB), (1.0, 0.5), 1, "ops", 2048 * MiB)
    assert wide(1024 * MiB) == 0.5 and wide(4096 * MiB) == 0.0     # the largest size's value, up to the sysfs LLC
    assert curve.label() == "16 MiB 100%, 64 MiB 80%, 256 MiB 0%"
    assert "this run's 3 memory probes" in curve.sentence()


def test_a_runs_curve_is_the_median_per_size_over_its_probes():
    summaries = [json.dumps({"memory_probe": [_probe(_llc(625.0, 3000.0, 20000.0)), _probe(None)]}),
                 {"memory_probe": [_probe(_llc(625.0, 2500.0, 20000.0)), _probe(_llc(625.0, 4000.0, 20000.0))]},
                 "not json", {"memory_probe": "x"}, None]
    curve = from_summaries(summaries, "run")
    assert curve.probes == 3 and curve.sizes == (16 * MiB, 64 * MiB, 256 * MiB)
    assert curve.found == pytest.approx((1.0, 0.8, 0.0))
    assert from_summaries([{"memory_probe": [_probe(None)]}], "run") is None    # probes before the curve existed


def test_the_run_s_own_probes_else_the_platform_s_sweeps(store):
    from sim_store import probed_run

    platforms.ensure_named(store, PLATFORM, device_kind="cpu")

    def run(kind: str, probes: list[dict], fail: bool = False) -> str:
        return probed_run(store, kind, PLATFORM, probes, fail=fail)

    assert run_llc_found(store, None, PLATFORM) is None                        # nothing recorded yet
    run("ops", [_probe(_llc(625.0, 4500.0, 20000.0))])
    run("ops", [_probe(_llc(625.0, 2500.0, 20000.0))], fail=True)             # a failed sweep does not count
    own = run("workload", [_probe(_llc(625.0, 2500.0, 20000.0)), _probe(_llc(625.0, 3000.0, 20000.0))])
    old = run("workload", [_probe(None)])
    found = run_llc_found(store, own, PLATFORM, 480 * MiB)
    assert found.source == "run" and found.probes == 2 and found.found[1] == pytest.approx(0.9)
    assert found.llc_bytes == 480 * MiB
    prices = run_llc_found(store, old, PLATFORM)
    assert prices.source == "ops" and prices.probes == 1 and prices.found[1] == pytest.approx(0.2)
    assert run_llc_found(store, None, PLATFORM).source == "ops"
