-- Sharding studies of completed runs (pmdb shard), and their plans with the error of each prediction.
CREATE OR REPLACE VIEW v_shard_studies AS
    SELECT s.*, json_array_length(s.config->'$.tables') AS num_tables,
           (SELECT count(*) FROM shard_plans p WHERE p.study_id = s.study_id) AS plans
    FROM shard_studies s JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_shard_plans AS
    SELECT p.*, s.task_id, s.series, s.platform, s.world_size, s.batch_size, s.chosen = p.sharder AS is_chosen,
           s.fastest = p.sharder AS is_fastest,
           (p.predicted_us - p.measured_us) / p.measured_us AS rel_error
    FROM shard_plans p JOIN v_shard_studies s USING (study_id);
