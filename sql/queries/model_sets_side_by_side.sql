-- The same trace set and mode predicted by two model-version sets, side by side (errors in %)
SELECT a.platform, a.family, a.workload, a.world_size, a.batch_size, a.mode, a.trace_set_id,
       round(a.measured_us / 1000, 3) AS measured_ms,
       a.model_set_id AS model_set_a, round(100 * a.rel_error, 2) AS error_a_pct,
       b.model_set_id AS model_set_b, round(100 * b.rel_error, 2) AS error_b_pct
FROM v_prediction_errors a
JOIN v_prediction_errors b
  ON a.trace_set_id = b.trace_set_id AND a.mode = b.mode AND a.platform = b.platform
 AND a.workload_run_id IS NOT DISTINCT FROM b.workload_run_id AND a.model_set_id < b.model_set_id
ORDER BY a.platform, a.family, a.workload, a.world_size, a.trace_set_id, a.model_set_id, b.model_set_id;
