"""simulator/cache_decay.py: what of the warm state survives a while of other work, from the probes' reads after a
busy wait against the read just flushed (a real store for the run's-else-sweeps' choice)."""
import json

import pytest

from pmdb import platform as platforms
from simulator.cache_decay import CacheDecay, from_summaries, probe_survives
from simulator.cache_levels import cold_share
from simulator.llc_found import LlcFound, run_llc_found

MiB = 2 ** 20
PLATFORM = "decay-cpu"


def _decay(l2: list[float], llc: list[float], flushed: tuple[float, float] = (10.0, 120.0)) -> dict:
    """A probe's "decay" entry: reads after waits of 0, 1, 4 and 16 ms, and the flushed reads (µs)."""
    return {"waits_us": [0, 1000, 4000, 16000], "sizes": {"l2": 256 * 1024, "llc": 4 * MiB},
            "reads_us": {"l2": l2, "llc": llc}, "flushed_us": {"l2": flushed[0], "llc": flushed[1]}}


def _llc() -> dict:
    return {"sizes": [16 * MiB, 64 * MiB, 256 * MiB], "reads_us": [625.0, 3000.0, 20000.0],
            "flushed_bytes": 64 * MiB, "flushed_us": 5000.0}


def test_survival_is_the_share_of_the_way_from_flushed_to_touched():
    waits, shares = probe_survives(_decay([4.0, 7.0, 10.0, 40.0], [40.0, 60.0, 100.0, 200.0]))
    assert waits == (0.0, 1000.0, 4000.0, 16000.0)
    assert shares["l2"] == pytest.approx([1.0, 0.5, 0.0, 0.0])       # slower than flushed counts as flushed
    assert shares["llc"] == pytest.approx([1.0, 0.75, 0.25, 0.0])
    # a level whose flushed read is no slower than its touched one tells nothing; the other stays
    assert set(probe_survives(_decay([12.0, 7.0, 10.0, 40.0], [40.0, 60.0, 100.0, 200.0]))[1]) == {"llc"}
    for bad in (None, "x", {**_decay([1, 2, 3, 4], [1, 2, 3, 4]), "waits_us": [1, 2, 3, 4]},
                {**_decay([1, 2, 3, 4], [1, 2, 3, 4]), "waits_us": [0, 2, 2, 4]},
                _decay([1, 2, 3], [1, 2, 3]), _decay(["x", 2, 3, 4], [1, 2, "y", 4], (0.5, 0.5))):
        assert probe_survives(bad) is None


def test_the_curve_is_the_median_per_wait_and_interpolates_in_time():
    summaries = [json.dumps({"memory_probe": [{"decay": _decay([4.0, 7.0, 10.0, 40.0], [40.0, 60.0, 100.0, 200.0])},
                                              {"read_us": 1.0}]}),
                 {"memory_probe": [{"decay": _decay([4.0, 5.5, 10.0, 40.0], [40.0, 50.0, 80.0, 200.0])},
                                   {"decay": _decay([4.0, 8.5, 10.0, 40.0], [40.0, 70.0, 120.0, 200.0])}]},
                 "not json", None, {"memory_probe": "x"}]
    decay = from_summaries(summaries)
    assert decay.probes == 3 and decay.waits_us == (0.0, 1000.0, 4000.0, 16000.0)
    assert decay.survives["l2"] == pytest.approx((1.0, 0.5, 0.0, 0.0))
    assert decay.survives["llc"] == pytest.approx((1.0, 0.75, 0.25, 0.0))
    assert decay("llc", 0.0) == 1.0 and decay("llc", 500.0) == pytest.approx(0.875)
    assert decay("llc", 2500.0) == pytest.approx(0.5) and decay("llc", 1e6) == 0.0
    assert decay("llc", float("nan")) == 1.0 and decay("l3", 5000.0) == 1.0   # unknown time or level: no loss
    assert decay.label() == "L2 1 ms 50%, 4 ms 0%, 16 ms 0%; LLC 1 ms 75%, 4 ms 25%, 16 ms 0%"
    assert from_summaries([{"memory_probe": [{"read_us": 1.0}]}]) is None     # probes before the decay existed


def test_reuse_pricing_scales_what_each_level_holds_by_what_survives_the_elapsed_time():
    l2, llc = 0.5 * MiB, 32 * MiB
    decay = CacheDecay((0.0, 1000.0, 4000.0), {"l2": (1.0, 0.5, 0.0), "llc": (1.0, 0.8, 0.2)}, 1)
    found = LlcFound((16 * MiB, 64 * MiB), (1.0, 0.0), 1, "run", llc, decay)
    assert cold_share([(0.0, 0.1 * MiB, 0.0)], l2, llc, found) == 0.0              # just touched: warm
    assert cold_share([(0.0, 0.1 * MiB, 1000.0)], l2, llc, found) == pytest.approx(0.5)   # half of L2 left
    assert cold_share([(0.0, 0.1 * MiB, 4000.0)], l2, llc, found) == 1.0           # nothing left: cold
    # too big for L2 (its warm timing from the LLC): the half MiB L2 holds keeps half, the rest the LLC's 0.8
    assert cold_share([(0.0, 8 * MiB, 1000.0)], l2, llc, found) == pytest.approx((8 - 0.5 * 0.5 - 7.5 * 0.8) / 8)
    # in the LLC while its warm timing had it in L2: half-way for what survives, cold for what does not
    assert cold_share([(4 * MiB, 0.1 * MiB, 1000.0)], l2, llc, found) == pytest.approx(0.2 + 0.8 * 0.5)
    assert cold_share([(40 * MiB, 0.1 * MiB, 1.0)], l2, llc, found) == 1.0           # out of every cache anyway
    # no time, or no decay measured: as before
    assert cold_share([(0.0, 0.1 * MiB)], l2, llc, found) == 0.0
    assert cold_share([(0.0, 0.1 * MiB, 4000.0)], l2, llc, found.with_decay(None)) == 0.0
    assert "warm state left after other work: L2 1 ms 50%" in found.sentence()
    assert found.to_json()["decay"]["survives"]["llc"] == [1.0, 0.8, 0.2]


def test_the_run_s_own_decay_else_the_platform_s_sweeps(store):
    from sim_store import probed_run

    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    fast = _decay([4.0, 10.0, 10.0, 10.0], [40.0, 120.0, 120.0, 120.0])
    slow = _decay([4.0, 4.0, 4.0, 7.0], [40.0, 40.0, 40.0, 80.0])
    probed_run(store, "ops", PLATFORM, [{"read_us": 1.0, "llc": _llc(), "decay": slow}])
    own = probed_run(store, "workload", PLATFORM, [{"read_us": 1.0, "llc": _llc(), "decay": fast}])
    old = probed_run(store, "workload", PLATFORM, [{"read_us": 1.0, "llc": _llc()}])
    assert run_llc_found(store, own, PLATFORM).decay("llc", 1000.0) == 0.0
    assert run_llc_found(store, old, PLATFORM).decay("llc", 16000.0) == pytest.approx(0.5)   # the sweeps'
    assert run_llc_found(store, None, PLATFORM).decay.probes == 1
