-- 0008: the op-coverage summary. `pmdb sql --query op_coverage` aggregated every op row of completed runs (medians,
-- distinct configs): 3-5 s on 10 M rows. A completing run now recomputes the groups it wrote (pmdb/op_coverage.py)
-- and the query reads this table. Filled here from the rows already stored.
CREATE TABLE op_coverage_summary (
    platform       VARCHAR NOT NULL,   -- platform of the rows
    op             VARCHAR NOT NULL,   -- op name as in op_measurements
    implementation VARCHAR NOT NULL,   -- implementation as in op_measurements
    pass           VARCHAR NOT NULL,   -- fwd or bwd
    cache_state    VARCHAR NOT NULL,   -- warm, cold or device
    rows           BIGINT NOT NULL,    -- measured (not skipped) rows of completed runs
    configs        BIGINT NOT NULL,    -- distinct config keys among them
    cv_median      DOUBLE,             -- median over rows of std_us / mean_us
    cv_p90         DOUBLE,             -- 90th percentile of std_us / mean_us
    min_us         DOUBLE,             -- fastest median_us (µs)
    median_us      DOUBLE,             -- median of median_us (µs)
    max_us         DOUBLE,             -- slowest median_us (µs)
    skipped        BIGINT NOT NULL,    -- skipped configs of completed runs
    threads        INTEGER,            -- highest intra-op thread count measured
    latest         TIMESTAMP,          -- newest measured_at
    PRIMARY KEY (platform, op, implementation, pass, cache_state)
);

INSERT INTO op_coverage_summary
WITH measured AS (
    SELECT m.platform, m.op, m.implementation, m.pass, m.cache_state, count(*) AS rows,
           count(DISTINCT m.config_key) AS configs,
           round(median(m.std_us / nullif(m.mean_us, 0)), 4) AS cv_median,
           round(quantile_cont(m.std_us / nullif(m.mean_us, 0), 0.9), 4) AS cv_p90,
           round(min(m.median_us), 2) AS min_us, round(median(m.median_us), 2) AS median_us,
           round(max(m.median_us), 2) AS max_us, max(m.threads) AS threads, max(m.measured_at) AS latest
    FROM op_measurements m JOIN collection_runs r USING (run_id)
    WHERE r.status = 'completed' AND m.skipped IS NULL AND m.median_us IS NOT NULL
    GROUP BY ALL
), skipped AS (
    SELECT m.platform, m.op, m.implementation, m.pass, m.cache_state, count(*) AS skipped
    FROM op_measurements m JOIN collection_runs r USING (run_id)
    WHERE r.status = 'completed' AND m.skipped IS NOT NULL
    GROUP BY ALL
)
SELECT coalesce(a.platform, s.platform), coalesce(a.op, s.op), coalesce(a.implementation, s.implementation),
       coalesce(a.pass, s.pass), coalesce(a.cache_state, s.cache_state), coalesce(a.rows, 0),
       coalesce(a.configs, 0), a.cv_median, a.cv_p90, a.min_us, a.median_us, a.max_us, coalesce(s.skipped, 0),
       a.threads, a.latest
FROM measured a FULL OUTER JOIN skipped s
     ON a.platform = s.platform AND a.op = s.op AND a.implementation = s.implementation AND a.pass = s.pass
        AND a.cache_state = s.cache_state;
