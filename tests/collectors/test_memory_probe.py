"""collectors/memory_probe.py: a real read of a real buffer on this host, on one thread."""
import pytest
import torch

from collectors.memory_probe import PROBE_BYTES, read_probe


def test_a_probe_times_reads_and_restores_the_thread_count():
    threads = torch.get_num_threads()
    probe = read_probe()
    assert probe["bytes"] == PROBE_BYTES == 64 * 2 ** 20
    assert probe["read_us"] > 0 and probe["at"].endswith("+00:00")
    assert torch.get_num_threads() == threads


def test_a_buffer_64_times_larger_takes_longer_to_read():
    small = min(read_probe(2 ** 20, reads=5)["read_us"] for _ in range(3))
    large = min(read_probe(PROBE_BYTES, reads=5)["read_us"] for _ in range(3))
    assert large > 4 * small   # 64x the bytes: at least 4x the time whatever the caches and a busy neighbour do


def test_a_probe_of_nothing_is_refused():
    with pytest.raises(ValueError):
        read_probe(0)


def test_a_probe_with_the_llc_curve_times_touched_and_flushed_reads():
    """The LLC curve's reads are real: each touched size and the 64 MiB buffer flushed from every cache level. The
    flushed read runs at DRAM pace, slower per byte than the smallest buffer read just touched (from the LLC)."""
    from collectors.memory_probe import LLC_SIZES
    from collectors.ops import cache_evict
    from simulator.llc_found import probe_found

    if cache_evict.load() is None:
        pytest.skip(f"no cache-line flush helper on this machine: {cache_evict.why_unavailable()}")
    def tells(entry: dict) -> bool:   # the flushed read clearly slower per byte than the smallest touched one
        return entry["flushed_us"] / entry["flushed_bytes"] > 1.2 * entry["reads_us"][0] / entry["sizes"][0]

    probes = []
    for _ in range(8):   # on the 48 MiB-L3 Intel guest a touched 16 MiB read often runs at memory's pace
        probes.append(read_probe(curve=True))
        if len(probes) >= 3 and any(tells(p["llc"]) for p in probes):
            break
    assert all(p["read_us"] > 0 for p in probes)
    llc = [p["llc"] for p in probes]
    assert all(entry["sizes"] == list(LLC_SIZES) and all(t > 0 for t in entry["reads_us"]) for entry in llc)
    best = min(llc, key=lambda entry: entry["reads_us"][0] / entry["flushed_us"])
    if not tells(best):
        pytest.skip(f"no touched 16 MiB read of {len(probes)} probes ran faster per byte than a flushed 64 MiB one: "
                    f"this host's LLC serves a process little at 16 MiB (the eviction itself: test_cache_evict)")
    found = probe_found(best)
    assert found[LLC_SIZES[0]] == 1.0 and all(0.0 <= f <= 1.0 for f in found.values())
    assert "llc" not in read_probe()       # the plain probe stays ~0.1 s


def test_a_probe_with_the_decay_times_reads_after_busy_waits_and_just_flushed():
    """The decay's reads are real: per level, a read just touched, after each busy wait, and just flushed. A 256 KiB
    buffer just touched comes from L2, faster than from memory after its lines were flushed, on any host."""
    from collectors.memory_probe import DECAY_SIZES, DECAY_WAITS_US
    from collectors.ops import cache_evict
    from simulator.cache_decay import probe_survives

    if cache_evict.load() is None:
        pytest.skip(f"no cache-line flush helper on this machine: {cache_evict.why_unavailable()}")
    probes = [read_probe(curve=True, decay=True) for _ in range(3)]
    for probe in probes:
        decay = probe["decay"]
        assert decay["waits_us"] == list(DECAY_WAITS_US) and decay["sizes"] == DECAY_SIZES
        assert all(len(decay["reads_us"][level]) == len(DECAY_WAITS_US) and decay["flushed_us"][level] > 0
                   for level in DECAY_SIZES)
    assert min(p["decay"]["reads_us"]["l2"][0] / p["decay"]["flushed_us"]["l2"] for p in probes) < 0.8
    survives = [probe_survives(p["decay"]) for p in probes]
    assert any(s is not None and s[1]["l2"][0] == 1.0 for s in survives)
    assert "decay" not in read_probe(curve=True)      # only where asked: the first probe of a run
