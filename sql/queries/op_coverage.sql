-- Op microbenchmark coverage per platform, op, implementation, pass and cache state: rows, distinct configs, noise (CV = std/mean over repetitions), time range, skipped configs
-- Read from op_coverage_summary, which every completing run refreshes for the groups it wrote (pmdb/op_coverage.py).
SELECT platform, op, implementation, pass, cache_state, rows, configs, cv_median, cv_p90, min_us, median_us, max_us,
       skipped, threads, latest
FROM op_coverage_summary
ORDER BY platform, op, implementation, pass, cache_state;
