"""Bus factors, their inversion and the message-size definitions."""
import math

import pytest

from collectors.comms.bus import (bandwidths, bus_factor, from_buffers, from_reported_size,
                                  world_size_from_factor)
from pmdb.errors import PmdbError


def test_bus_factors():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_reduce", 2) == pytest.approx(1.0)
    for collective in ("all_to_all", "all_to_allv", "all_gather", "reduce_scatter"):
        assert bus_factor(collective, 4) == pytest.approx(0.75)
    with pytest.raises(PmdbError):
        bus_factor("broadcast", 4)


@pytest.mark.parametrize("collective", ["all_reduce", "all_to_all", "all_gather"])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_world_size_from_factor_inverts(collective, n):
    assert world_size_from_factor(collective, bus_factor(collective, n) * 1.0005) == n
    assert world_size_from_factor(collective, bus_factor(collective, n) * 0.9995) == n


def test_world_size_from_factor_rejects_misfits():
    assert world_size_from_factor("all_reduce", 0.5) is None
    assert world_size_from_factor("all_to_all", 1.2) is None
    between = (bus_factor("all_reduce", 7) + bus_factor("all_reduce", 8)) / 2
    assert world_size_from_factor("all_reduce", between) is None  # ambiguous: refuse rather than guess


def test_sizes_from_buffers_random():
    sizes = from_buffers([100, 40, 60], [30, 90, 80])
    assert sizes.total_bytes == 200 and sizes.max_rank_bytes == 100 and sizes.bytes_per_rank is None
    assert sizes.sent_bytes == [100, 40, 60] and sizes.recv_bytes == [30, 90, 80]


@pytest.mark.parametrize("collective, sent, recv", [("all_reduce", 1024, 1024), ("all_to_all", 1024, 1024),
                                                    ("all_gather", 256, 1024), ("reduce_scatter", 1024, 256)])
def test_sizes_from_reported_size(collective, sent, recv):
    sizes = from_reported_size(collective, 1024, 4)
    assert sizes.max_rank_bytes == 1024
    assert sizes.sent_bytes == [sent] * 4 and sizes.recv_bytes == [recv] * 4
    assert sizes.bytes_per_rank == sent and sizes.total_bytes == 4 * sent


def test_bandwidths():
    algbw, busbw = bandwidths("all_reduce", 4, 1e6, 100.0)  # 1 MB in 100 µs = 10 GB/s
    assert algbw == pytest.approx(10.0) and busbw == pytest.approx(15.0)
    assert all(math.isnan(v) for v in bandwidths("all_reduce", 4, 1e6, 0.0))
