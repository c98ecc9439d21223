-- Plans of every sharding study of completed runs: predicted vs measured per-iteration time (ms), error, prediction time
SELECT p.study_id, p.platform, p.series, p.task_id, p.position, p.sharder, p.is_chosen, p.is_fastest,
       round(p.predicted_us / 1e3, 3) AS predicted_ms, round(p.measured_us / 1e3, 3) AS measured_ms,
       round(100 * p.rel_error, 2) AS error_pct, round(100 * p.measured_spread, 1) AS spread_pct,
       round(p.predict_s, 3) AS predict_s, p.prediction_id, p.workload_run_id
FROM v_shard_plans p
ORDER BY p.platform, p.series NULLS LAST, p.task_id, p.study_id, p.position;
