"""collectors.wake_probe: one real probe on this host. Whether the host loses time after scalar work is what it
measures (the 48 MiB-L3 Intel host does, other hosts need not), so the test checks the probe's arithmetic and that
each call was timed, not the size of the loss."""
import time

import pytest

from collectors.wake_probe import CALLS, SHAPE, read_wake, spin


def test_a_probe_times_every_call_and_sums_what_the_calls_after_the_spin_lost():
    probe = read_wake(rounds=3, spin_us=600.0)
    rows, features, out = SHAPE
    assert probe["op"] == f"linear {rows}x{features}->{out}" and probe["rounds"] == 3 and probe["spin_us"] == 600.0
    after, back = probe["after_spin_us"], probe["back_to_back_us"]
    assert len(after) == CALLS and back > 0 and all(t > 0 for t in after)
    assert probe["lost_us"] == pytest.approx(sum(max(t - back, 0.0) for t in after), abs=0.3)
    assert probe["at"].endswith("+00:00")


def test_the_spin_lasts_at_least_what_it_is_asked():
    start = time.perf_counter_ns()
    spin(500.0)
    assert (time.perf_counter_ns() - start) / 1e3 >= 500.0


def test_a_workload_rank_probes_on_one_thread_and_keeps_its_own_threads():
    """collectors.workloads.worker.one_thread: the probe runs on one intra-op thread, as `collect ops` measures,
    and the rank's thread count is set back after it, also when the probe fails."""
    import torch

    from collectors.workloads.worker import one_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert one_thread(lambda: {"threads": torch.get_num_threads()}) == {"threads": 1}
        assert torch.get_num_threads() == 2

        def fails() -> dict:
            raise RuntimeError("probe failed")

        with pytest.raises(RuntimeError):
            one_thread(fails)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
