"""A sweep's resident memory does not grow with the configs it has measured (it grew by every torch EmbeddingBag
table before: 21.7 GB within one big-table sweep)."""
from __future__ import annotations

import os

from collectors.ops.sweep import Item, Sweep, SweepOptions
from collectors.ops.timer import TimerSettings
from pmdb import platform as platforms

TABLE_ROWS, TABLE_DIM = 100_000, 128          # 51 MB per table: far above any leak of bookkeeping
CONFIGS = 6
TABLE_BYTES = TABLE_ROWS * TABLE_DIM * 4       # 51.2 MB (48.8 MiB)
# measured: 0-1 MB with the fix, 253 MB (a table per config) before; once, in a fresh-clone suite, 48.05 MiB: the
# heap (mmap off, pmdb's malloc settings) kept one table-sized block for reuse and stayed there for the later
# configs. A leak grows by a table per config: at most one table, and none over the second half of the sweep.
BOUND_BYTES = int(1.5 * TABLE_BYTES)
LATE_BOUND_BYTES = TABLE_BYTES // 2


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
    late = max(sweep.rss[CONFIGS:]) - sweep.rss[CONFIGS - 1]   # the second half: 3 configs x 2 implementations
    assert late < LATE_BOUND_BYTES, [round(r / 2 ** 20) for r in sweep.rss]
