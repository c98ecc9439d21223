"""A sweep's resident memory does not grow with the configs it has measured (it grew by every torch EmbeddingBag
table before: 21.7 GB within one big-table sweep)."""
from __future__ import annotations

import os

from collectors.ops.sweep import Item, Sweep, SweepOptions
from collectors.ops.timer import TimerSettings
from pmdb import platform as platforms

TABLE_ROWS, TABLE_DIM = 100_000, 128          # 51 MB per table: far above any leak of bookkeeping
CONFIGS = 6
BOUND_BYTES = 48 * 2 ** 20                     # measured: 0-1 MB with the fix, 253 MB (a table per config) before


def rss_bytes() -> int:
    """Resident set size of this process (bytes), from /proc/self/statm."""
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class _Probe(Sweep):
    """The real sweep, recording RSS after every config."""

    rss: list[int]

    def _measure(self, item: Item) -> None:
        super()._measure(item)
        self.rss.append(rss_bytes())


def test_rss_stays_flat_across_big_embedding_configs(store):
    platform = platforms.register_local(store, None)["name"]
    configs = [{"B": 256, "E": [TABLE_ROWS + 1000 * i], "D": [TABLE_DIM], "L": [8.0]} for i in range(CONFIGS)]
    options = SweepOptions(ops=["embedding_lookup"], configs=configs, cache="warm",
                           settings=TimerSettings(warmup=1, min_reps=2, max_reps=2, min_time_us=0.0))
    with store.run("ops", platform, {}) as run:
        sweep = _Probe(store, run, platform, options)
        sweep.rss = []
        sweep.execute(progress=False)
    assert len(sweep.rss) == 2 * CONFIGS  # both implementations of every config
    measured = store.scalar("SELECT count(*) FROM op_measurements WHERE skipped IS NULL")
    assert measured == 2 * CONFIGS * 2
    growth = max(sweep.rss[2:]) - sweep.rss[1]  # after the first config of each implementation
    assert growth < BOUND_BYTES, [round(r / 2 ** 20) for r in sweep.rss]
