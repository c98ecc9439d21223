-- Sharding studies of completed runs (pmdb shard), one row each: chosen and measured-fastest plan, success, wall times
SELECT s.study_id, s.platform, s.series, s.task_id, s.world_size, s.batch_size, s.num_tables, s.plans, s.chosen,
       s.fastest, round(100 * s.chosen_slowdown, 2) AS chosen_slowdown_pct, s.success, s.trace_origin,
       round(s.capture_s, 2) AS capture_s, round(s.predict_s, 2) AS predict_s, round(s.validate_s, 1) AS validate_s,
       s.created_at
FROM v_shard_studies s
ORDER BY s.platform, s.series NULLS LAST, s.task_id, s.study_id;
