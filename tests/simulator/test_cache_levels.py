"""--cache-state reuse: each op between its warm and cold model by where its operands' reuse distances put them."""
from __future__ import annotations

import numpy as np
import pytest

from fitters.roofline import uncalibrated
from pmdb.traces.from_store import load_graphs
from simulator.cache_decay import CacheDecay
from simulator.cache_levels import UNKNOWN, between, cold_share
from simulator.llc_found import LlcFound
from simulator.model_set import ModelRef, ModelSelection, ModelSet, Overheads
from simulator.timing import ModelTiming

MB = 2 ** 20


def test_cold_share_by_level():
    l2, llc = 0.5 * MB, 32 * MB
    assert cold_share([(0.0, 0.1 * MB)], l2, llc) == 0.0          # still in L2: warm
    assert cold_share([(40 * MB, 0.1 * MB)], l2, llc) == 1.0      # pushed out of the LLC: cold
    assert cold_share([(4 * MB, 0.1 * MB)], l2, llc) == 0.5       # in the LLC, warm timing had it in L2
    assert cold_share([(4 * MB, 8 * MB)], l2, llc) == 0.0         # too big for L2: warm timing was the LLC too
    # byte-weighted: 1 MB in L2 range (distance 0 but larger than L2 -> warm from LLC), 1 MB beyond the LLC
    assert cold_share([(0.0, MB), (40 * MB, MB)], l2, llc) == pytest.approx(0.5)
    assert cold_share([], l2, llc) == UNKNOWN
    # the LLC the run found (simulator.llc_found) in place of LRU over the sysfs LLC: what L2 does not hold is
    # found in the LLC at the fraction for its footprint (distance + size) times the ranks sharing it
    half = lambda nbytes: 1.0 if nbytes <= 16 * MB else 0.5 if nbytes <= 64 * MB else 0.0   # noqa: E731
    # past LRU's 32 MiB: half found, and that half half-way (its warm timing had it in L2): 0.5 + 0.5 * 0.5
    assert cold_share([(40 * MB, 0.1 * MB)], l2, llc, half) == pytest.approx(0.75)
    assert cold_share([(40 * MB, 8 * MB)], l2, llc, half, sharing=2) == 1.0           # 96 MiB footprint: none
    assert cold_share([(4 * MB, 8 * MB)], l2, llc, half) == 0.0                       # within 16 MiB: warm, as LRU
    assert cold_share([(4 * MB, 0.1 * MB)], l2, llc, half) == 0.5                     # warm timing had it in L2
    assert cold_share([(0.0, 0.1 * MB)], l2, llc, lambda nbytes: 0.0) == 0.0          # L2 holds it whatever LLC
    # linear in the bytes: a quarter of the bytes cold costs a quarter of the way (not the log scale's 35.4)
    both = between(np.array([100.0, 100.0, 100.0]), np.array([25.0, 25.0, 25.0]), np.array([0.0, 0.5, 0.25]))
    assert both.tolist() == pytest.approx([25.0, 62.5, 43.75])


@pytest.mark.slow
def test_reuse_mode_prices_between_warm_and_cold(cpu_trace_set):
    store, ts, platform = cpu_trace_set
    plain = load_graphs(store, ts, pick="best", detail=True)[0]
    assert not any(op.reuse for rg in plain.ranks for op in rg.ops)   # read only when a prediction asks for it
    graph = load_graphs(store, ts, pick="best", detail=True, reuse=True)[0]
    linears = [op for rg in graph.ranks for op in rg.ops if op.name == "aten::linear"]
    assert linears and all(op.reuse for op in linears)       # sized inputs from the execution trace
    assert all(size > 0 and distance >= 0 for op in linears for distance, size, _ in op.reuse)
    # the profiled trace's times: each input's µs since its last access, within an iteration and a half
    ops = graph.ranks[0].ops
    period = max(ops[-1].start_us + ops[-1].cpu_dur_us - ops[0].start_us, 1.0)
    assert all(0 <= since <= 2 * period for op in linears for _, _, since in op.reuse)
    peaks = {"gemm_flops": 50e9, "mem_bw": 10e9}
    cold = uncalibrated("fully_connected", "fwd", "float32", {"gemm_flops": 5e9, "mem_bw": 1e9})
    warm = uncalibrated("fully_connected", "fwd", "float32", peaks)
    key = ("fully_connected", "fwd", "torch")

    def times(cache_bytes, llc_found=None):
        models = ModelSet(kernels={key: ModelRef("fc.cold", 1, cold, "roofline")},
                          warm={key: ModelRef("fc.warm", 1, warm, "roofline")}, peaks=peaks,
                          selection=ModelSelection("champion", "reuse", "0" * 8))
        timing = ModelTiming(models, Overheads.latest(store, platform), "sync_host", cache_bytes=cache_bytes,
                             llc_found=llc_found)
        timing.programs(graph)
        assert timing.usage.models == {("fc.cold", 1): len(linears) + 10, ("fc.warm", 1): len(linears) + 10}
        return np.array([timing._time[id(op)] for op in linears])

    all_warm, all_cold = times((2 ** 40, 2 ** 41)), times((1, 2))   # cold but for the 1-byte caches' bytes
    assert np.all(all_cold > 2 * all_warm)
    assert times((2 ** 40, 2 ** 41)) == pytest.approx(all_warm)
    # an L2 that holds each op's operands (its warm timing came from L2) but not what the step touched in between
    l2 = max(sum(entry[1] for entry in op.reuse) for op in linears) + 1
    shares = np.array([cold_share(op.reuse, l2, 2 ** 41) for op in linears])
    assert np.all(shares <= 0.5) and np.any((shares > 0) & (shares < 1))
    middle = times((l2, 2 ** 41))
    assert middle == pytest.approx(between(all_cold, all_warm, shares), rel=1e-3)
    inside = (shares > 0) & (shares < 1)
    assert np.all(middle[inside] > all_warm[inside] * 1.01) and np.all(middle[inside] < all_cold[inside] * 0.99)
    # the LLC the run found decides instead of the sysfs size: all of it found is LRU's warm, none of it cold
    assert times((1, 2 ** 41), lambda nbytes: 1.0) == pytest.approx(all_warm)
    assert times((1, 2 ** 41), lambda nbytes: 0.0) == pytest.approx(all_cold)
    assert np.all(times((1, 2 ** 41), lambda nbytes: 0.5) < all_cold * 0.99)
    # all of it found, but lost within a µs of other work (simulator.cache_decay): each op as cold as its
    # operands' traced time since their last access makes it, most of the way to the cold model
    lost = CacheDecay((0.0, 1.0), {"l2": (1.0, 0.0), "llc": (1.0, 0.0)}, 1)
    decayed = times((1, 2 ** 41), LlcFound((MB, 2 * MB), (1.0, 1.0), 1, "run", 2 ** 41, lost))
    assert np.all(decayed >= all_warm * 0.999) and np.all(decayed <= all_cold * 1.001)
    assert decayed.sum() > all_warm.sum() + 0.5 * (all_cold.sum() - all_warm.sum())
    unknown = times((None, None))           # no detected cache sizes: half-way
    assert unknown == pytest.approx((all_warm + all_cold) / 2, rel=1e-3)


@pytest.mark.slow
def test_predict_with_cache_state_reuse_reads_reuse_distances(cpu_trace_set):
    """Through the registry and a prediction session: reuse mode loads the graph with its reuse distances (else
    every op would be priced half-way, as blend prices it)."""
    from sim_store import warm_and_cold_linear

    from pmdb import platform as platforms
    from simulator.predict import predict_trace_set

    store, ts, platform = cpu_trace_set
    warm_and_cold_linear(store, platform)
    assert platforms.load(store, platform).cache_bytes[1]   # this machine's LLC was detected at registration
    reuse = predict_trace_set(store, ts, cache_state="reuse")
    blend = predict_trace_set(store, ts, cache_state="blend")
    assert reuse.model_selection.cache_state == "reuse" and blend.model_selection.cache_state == "blend"
    assert reuse.predicted_us != pytest.approx(blend.predicted_us, rel=1e-6)
    assert not any("LLC found" in note for note in reuse.defaults)     # no probe with the LLC curve: LRU, sysfs
    # an op sweep that recorded the LLC it found (real probes on this host): reuse now prices by that, and says so
    from sim_store import telling_probes
    probes = telling_probes(2)   # a probe whose curve tells no LLC from memory is left out, as predict does
    with store.run("ops", platform, {}) as run:
        run.summary = {"memory_probe": probes}
    found = predict_trace_set(store, ts, cache_state="reuse")
    note = next(n for n in found.defaults if "LLC found" in n)
    assert "the platform's op sweeps' 2 memory probes" in note and "16 MiB 100%" in note
    assert predict_trace_set(store, ts, cache_state="blend").defaults == blend.defaults   # only reuse reads it
    # the CPU default is then reuse pricing in that LLC too; --cache-state cold keeps the cold models alone
    default = predict_trace_set(store, ts)
    assert default.model_selection.cache_state == "default" and any("LLC found" in n for n in default.defaults)
    assert default.predicted_us == pytest.approx(found.predicted_us, rel=1e-9)
    assert default.llc_found.to_json() == found.llc_found.to_json() and found.llc_found.source == "ops"
    assert found.llc_found.to_json()["probes"] == 2 and blend.llc_found is None
    cold = predict_trace_set(store, ts, cache_state="cold")
    assert not any("LLC found" in n for n in cold.defaults) and cold.predicted_us > default.predicted_us
    assert cold.llc_found is None
