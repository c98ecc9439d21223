"""The op-coverage summary (``op_coverage_summary``): per platform, op, implementation, pass and cache state the rows,
distinct configs, noise (CV = std/mean over repetitions, median and p90), time range (µs), skipped configs and the
latest measurement of completed runs.

Medians and distinct counts over millions of rows take seconds, and the answer changes only when a run completes.
So a completing run recomputes the groups it touched, in its writer's transaction, and ``pmdb sql --query
op_coverage`` reads the summary (10 M rows: a scan of a few hundred summary rows instead of the measurements).
"""
from __future__ import annotations

import contextlib

import duckdb

GROUP = ("platform", "op", "implementation", "pass", "cache_state")

# The aggregation over completed runs, restricted to the groups in the temporary table _pmdb_groups when given.
_AGGREGATE = """
WITH measured AS (
    SELECT m.platform, m.op, m.implementation, m.pass, m.cache_state,
           count(*)                                                      AS rows,
           count(DISTINCT m.config_key)                                  AS configs,
           round(median(m.std_us / nullif(m.mean_us, 0)), 4)             AS cv_median,
           round(quantile_cont(m.std_us / nullif(m.mean_us, 0), 0.9), 4) AS cv_p90,
           round(min(m.median_us), 2)                                    AS min_us,
           round(median(m.median_us), 2)                                 AS median_us,
           round(max(m.median_us), 2)                                    AS max_us,
           max(m.threads)                                                AS threads,
           max(m.measured_at)                                            AS latest
    FROM op_measurements m JOIN collection_runs r USING (run_id)
    WHERE r.status = 'completed' {groups_filter} AND m.skipped IS NULL AND m.median_us IS NOT NULL
    GROUP BY ALL
), skipped AS (
    SELECT m.platform, m.op, m.implementation, m.pass, m.cache_state, count(*) AS skipped
    FROM op_measurements m JOIN collection_runs r USING (run_id)
    WHERE r.status = 'completed' {groups_filter} AND m.skipped IS NOT NULL
    GROUP BY ALL
)
SELECT coalesce(a.platform, s.platform), coalesce(a.op, s.op), coalesce(a.implementation, s.implementation),
       coalesce(a.pass, s.pass), coalesce(a.cache_state, s.cache_state), coalesce(a.rows, 0),
       coalesce(a.configs, 0), a.cv_median, a.cv_p90, a.min_us, a.median_us, a.max_us, coalesce(s.skipped, 0),
       a.threads, a.latest
FROM measured a FULL OUTER JOIN skipped s
     ON a.platform = s.platform AND a.op = s.op AND a.implementation = s.implementation AND a.pass = s.pass
        AND a.cache_state = s.cache_state
"""
_KEY = " AND ".join(f"o.{c} = g.{c}" for c in GROUP)
_GROUPS_FILTER = ("AND EXISTS (SELECT 1 FROM _pmdb_groups g WHERE "
                  + " AND ".join(f"g.{c} = m.{c}" for c in GROUP) + ")")


def refresh_for_run(conn: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Recompute the summary rows of the groups ``run_id`` wrote op rows to (none: nothing to do). Returns the
    number of groups recomputed. Call it inside the transaction that completes the run."""
    conn.execute("CREATE OR REPLACE TEMP TABLE _pmdb_groups AS SELECT DISTINCT platform, op, implementation, "
                 "pass, cache_state FROM op_measurements WHERE run_id = ?", [run_id])
    try:
        count = conn.execute("SELECT count(*) FROM _pmdb_groups").fetchone()[0]
        if count:
            conn.execute(f"DELETE FROM op_coverage_summary o WHERE EXISTS "
                         f"(SELECT 1 FROM _pmdb_groups g WHERE {_KEY})")
            conn.execute("INSERT INTO op_coverage_summary " + _AGGREGATE.format(groups_filter=_GROUPS_FILTER))
        return int(count)
    finally:
        with contextlib.suppress(duckdb.Error):  # an aborted transaction: the original error is what matters
            conn.execute("DROP TABLE IF EXISTS _pmdb_groups")


def rebuild(conn: duckdb.DuckDBPyConnection) -> int:
    """Recompute the whole summary (after rows were moved between runs or merged). Returns its row count."""
    conn.execute("DELETE FROM op_coverage_summary")
    conn.execute("INSERT INTO op_coverage_summary " + _AGGREGATE.format(groups_filter=""))
    return int(conn.execute("SELECT count(*) FROM op_coverage_summary").fetchone()[0])


def stale_groups(conn: duckdb.DuckDBPyConnection) -> int:
    """Groups whose summary row disagrees with a fresh aggregation (rows, configs or skipped); 0 when consistent.
    ``pmdb doctor`` style check, a full scan: seconds on a big store."""
    fresh = _AGGREGATE.format(groups_filter="")
    return int(conn.execute(
        f"SELECT count(*) FROM (({fresh}) EXCEPT (SELECT * FROM op_coverage_summary))").fetchone()[0])
