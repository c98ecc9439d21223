-- Table IV per platform and series: validated sharding studies, success rate, prediction time per plan, and the prediction side's wall time against running every plan
WITH studies AS (
    SELECT *, coalesce(series, '(single studies)') AS series_label FROM v_shard_studies WHERE success IS NOT NULL),
plan_times AS (
    SELECT s.platform, s.series_label, s.world_size, avg(p.predict_s) AS predict_s_per_plan
    FROM studies s JOIN shard_plans p USING (study_id)
    GROUP BY s.platform, s.series_label, s.world_size)
SELECT s.platform, s.series_label AS series, s.world_size,
       count(*) AS tasks, sum(s.success::INTEGER) AS successes,
       round(100 * avg(s.success::INTEGER), 1) AS success_rate_pct,
       sum((s.chosen = s.fastest)::INTEGER) AS chosen_is_fastest,
       round(100 * avg(s.chosen_slowdown), 2) AS mean_chosen_slowdown_pct,
       round(100 * max(s.chosen_slowdown), 2) AS max_chosen_slowdown_pct,
       round(any_value(t.predict_s_per_plan), 3) AS predict_s_per_plan,
       round(sum(coalesce(s.capture_s, 0) + s.predict_s), 1) AS prediction_side_s,
       round(sum(s.validate_s), 1) AS run_every_plan_s
FROM studies s JOIN plan_times t USING (platform, series_label, world_size)
GROUP BY s.platform, s.series_label, s.world_size
ORDER BY s.platform, series, s.world_size;
