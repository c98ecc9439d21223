"""Thread-count check of a model-mode prediction: a workload run records the intra-op threads per rank it ran with
(``workload_runs.threads``), every op measurement the threads it was timed with (``op_measurements.threads``). Kernel
models fitted on measurements of another thread count predict another machine configuration; the prediction says
so in one warning line. Threads and cores also decide whether a CPU rank's communication thread has a core of its
own (:func:`comm_shares_core`)."""
from __future__ import annotations

import pandas as pd

from pmdb.platform import Platform
from pmdb.store import Store

_MODEL_THREADS = """
SELECT DISTINCT m.name, m.version, o.threads
FROM model_versions m
JOIN v_op_measurements o ON list_contains(m.data_runs, o.run_id) AND o.op = m.op AND o.pass = m.pass
     AND o.platform = m.platform
WHERE m.world_size IS NULL AND m.name || ':' || m.version IN (SELECT unnest(?::VARCHAR[]))
  AND o.threads IS NOT NULL
"""


def run_threads(store: Store, workload_run_id: str | None) -> int | None:
    """Intra-op threads per rank of a workload run (None: no run, or not recorded)."""
    if workload_run_id is None:
        return None
    value = store.scalar("SELECT threads FROM workload_runs WHERE run_id = ?", [workload_run_id])
    return None if value is None or pd.isna(value) else int(value)


def model_threads(store: Store, versions: list[tuple[str, int]]) -> dict[int, list[str]]:
    """threads -> the kernel model versions ('name:version') fitted on measurements timed with that many threads
    (from each version's training runs, ``model_versions.data_runs``)."""
    if not versions:
        return {}
    frame = store.query(_MODEL_THREADS, [[f"{n}:{int(v)}" for n, v in versions]])
    out: dict[int, list[str]] = {}
    for name, version, threads in frame.sort_values(["threads", "name"]).itertuples(index=False):
        out.setdefault(int(threads), []).append(f"{name}:{int(version)}")
    return out


def thread_mismatch(store: Store, workload_run_id: str | None, versions: list[tuple[str, int]]) -> str | None:
    """One line when kernel models in ``versions`` were fitted on measurements of a thread count other than the
    workload run's; None when they agree or either side is unknown."""
    threads = run_threads(store, workload_run_id)
    if threads is None:
        return None
    other = {t: names for t, names in model_threads(store, versions).items() if t != threads}
    if not other:
        return None
    counts = ", ".join(f"{len(names)} fitted at {t} thread{'s' if t != 1 else ''} ({names[0]}"
                       f"{', ...' if len(names) > 1 else ''})" for t, names in sorted(other.items()))
    return (f"workload run {workload_run_id} ran with {threads} intra-op thread{'s' if threads != 1 else ''} per "
            f"rank, but kernel models used here were measured with another thread count: {counts}; their times "
            f"describe that configuration")


def comm_shares_core(platform: Platform | None, world_size: int, threads: int | None) -> bool:
    """Whether the ranks of a sync-host (CPU) platform leave no core to their communication threads: the platform's
    usable cores are fewer than world size x (intra-op threads per rank, 1 when unknown, + 1 communication thread).
    The ranks are taken to share the platform's one host (a CPU platform is one machine). Never on async devices."""
    if platform is None or not platform.sync_host or platform.cpu_cores is None or world_size < 2:
        return False
    return platform.cpu_cores < world_size * ((threads or 1) + 1)
