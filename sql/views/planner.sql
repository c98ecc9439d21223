-- Planner studies of completed runs, with their best configuration (position 1) when one fits.
CREATE OR REPLACE VIEW v_plan_studies AS
    SELECT s.*, c.time_s AS best_time_s, c.throughput AS best_throughput, c.memory_bytes AS best_memory_bytes,
           c.strategy AS best_strategy, c.config AS best_config
    FROM plan_studies s JOIN completed_runs r USING (run_id)
    LEFT JOIN plan_configs c ON c.study_id = s.study_id AND c.position = 1;

CREATE OR REPLACE VIEW v_plan_configs AS
    SELECT c.* FROM plan_configs c JOIN plan_studies s USING (study_id) JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_plan_validations AS
    SELECT v.* FROM plan_validations v JOIN completed_runs r USING (run_id);
