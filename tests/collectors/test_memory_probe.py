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
