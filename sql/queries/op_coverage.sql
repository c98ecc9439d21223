-- Op microbenchmark coverage per platform, op, implementation, pass and cache state: rows, distinct configs, noise (CV = std/mean over repetitions), time range, skipped configs
WITH measured AS (
    SELECT platform, op, implementation, pass, cache_state,
           count(*)                                   AS rows,
           count(DISTINCT config_key)                 AS configs,
           round(median(std_us / nullif(mean_us, 0)), 4)          AS cv_median,
           round(quantile_cont(std_us / nullif(mean_us, 0), 0.9), 4) AS cv_p90,
           round(min(median_us), 2)                   AS min_us,
           round(median(median_us), 2)                AS median_us,
           round(max(median_us), 2)                   AS max_us,
           max(threads)                               AS threads,
           max(measured_at)                           AS latest
    FROM v_op_measurements
    GROUP BY ALL
), skipped AS (
    SELECT m.platform, m.op, m.implementation, m.pass, m.cache_state, count(*) AS skipped
    FROM op_measurements m JOIN completed_runs r USING (run_id)
    WHERE m.skipped IS NOT NULL
    GROUP BY ALL
)
SELECT coalesce(a.platform, s.platform) AS platform, coalesce(a.op, s.op) AS op,
       coalesce(a.implementation, s.implementation) AS implementation, coalesce(a.pass, s.pass) AS pass,
       coalesce(a.cache_state, s.cache_state) AS cache_state, coalesce(a.rows, 0) AS rows, coalesce(a.configs, 0) AS configs,
       a.cv_median, a.cv_p90, a.min_us, a.median_us, a.max_us, coalesce(s.skipped, 0) AS skipped, a.threads, a.latest
FROM measured a FULL OUTER JOIN skipped s
     ON a.platform = s.platform AND a.op = s.op AND a.implementation = s.implementation AND a.pass = s.pass
        AND a.cache_state = s.cache_state
ORDER BY platform, op, implementation, pass, cache_state;
