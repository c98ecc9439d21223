-- Spec-only ranges against their ground truth, per target platform: of the measured runs predicted on a GPU known
-- by its spec sheet only (the latest prediction of each run and trace set), how many lie within the range
-- `pmdb predict` gave (simulator/cross_gpu_range.py), and the range's median ends relative to the prediction.
WITH latest AS (
    SELECT * FROM v_predictions
    WHERE range_low_us IS NOT NULL AND measured_us IS NOT NULL
    QUALIFY row_number() OVER (PARTITION BY target_platform, trace_set_id, coalesce(workload_run_id, '')
                               ORDER BY prediction_id DESC) = 1
)
SELECT target_platform AS platform, count(*) AS n,
       count(*) FILTER (WHERE measured_us BETWEEN range_low_us AND range_high_us) AS within,
       round(100 * median(range_low_us / predicted_us - 1), 1) AS low_pct,
       round(100 * median(range_high_us / predicted_us - 1), 1) AS high_pct,
       round(100 * median(abs(rel_error)), 2) AS median_abs_error_pct
FROM latest
GROUP BY 1
ORDER BY 1;
