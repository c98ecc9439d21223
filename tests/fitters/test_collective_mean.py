"""Collective models are fitted on a row's mean latency over iterations where the sweep stored one (gloo on a small
host is bimodal per call, and a step pays every call), else on its median (rows before migration 0012, imports)."""
import numpy as np

from fitters.data import collective_groups
from pmdb import platform as platforms
from .conftest import PLATFORM, insert_collectives


def test_the_mean_is_the_time_where_stored_else_the_median(store):
    sizes = [2 ** 10, 2 ** 14, 2 ** 18]
    insert_collectives(store, "all_reduce", 2, sizes, [100.0, 120.0, 400.0])        # an older sweep: median only
    platforms.ensure_named(store, PLATFORM, device_kind="cpu")
    with store.run("comms", PLATFORM) as run:
        store.insert("collective_measurements", [
            {"run_id": run.run_id, "platform": PLATFORM, "collective": "all_reduce", "backend": "gloo",
             "world_size": 2, "split_kind": "equal", "rank": None, "total_bytes": 2 * s, "max_rank_bytes": s,
             "lat_p50_us": 100.0, "lat_mean_us": 100.0 + 3000.0 * share, "source": "measured"}
            for s, share in zip(sizes, (0.1, 0.5, 0.0))])
    (group,) = collective_groups(store, PLATFORM)
    assert np.allclose(group.rows["lat_us"], [100.0, 120.0, 400.0, 400.0, 1600.0, 100.0])
