-- Views over rows of completed runs only: queries and reports read these, never the raw tables,
-- so rows of failed, interrupted or still-running runs never count.
CREATE OR REPLACE VIEW completed_runs AS
    SELECT * FROM collection_runs WHERE status = 'completed';

-- Measured (not skipped) op timings of completed runs. CUDA rows timed as one call between two events before
-- migration 0015 ('single_call': the host's launch path, not the kernel) are not kernel times and do not count.
-- node_us: what one node of a training step pays, the row's median without the autograd engine's own cost of the
-- benchmark's backward call (CPU backward rows since 0018; never below a tenth of the median); the median
-- elsewhere.
CREATE OR REPLACE VIEW v_op_measurements AS
    SELECT m.*, CASE WHEN m.engine_call_us IS NULL THEN m.median_us
                     ELSE greatest(m.median_us - m.engine_call_us, 0.1 * m.median_us) END AS node_us
    FROM op_measurements m JOIN completed_runs r USING (run_id)
    WHERE m.skipped IS NULL AND m.median_us IS NOT NULL AND m.device_timing IS DISTINCT FROM 'single_call';

CREATE OR REPLACE VIEW v_embedding_batch_stats AS
    SELECT s.* FROM embedding_batch_stats s JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_collective_measurements AS
    SELECT c.* FROM collective_measurements c JOIN completed_runs r USING (run_id);

-- Latest measured peak per platform, metric and dtype.
CREATE OR REPLACE VIEW v_platform_peaks AS
    SELECT p.platform, p.metric, p.dtype, arg_max(p.value, p.measured_at) AS value, max(p.measured_at) AS measured_at
    FROM platform_peaks p JOIN completed_runs r USING (run_id)
    GROUP BY p.platform, p.metric, p.dtype;

CREATE OR REPLACE VIEW v_workload_runs AS
    SELECT w.*, r.started_at, r.finished_at FROM workload_runs w JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_e2e_measurements AS
    SELECT e.* FROM e2e_measurements e JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_trace_sets AS
    SELECT t.* FROM trace_sets t JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_traces AS
    SELECT t.* FROM traces t JOIN v_trace_sets s USING (trace_set_id);

CREATE OR REPLACE VIEW v_predictions AS
    SELECT p.*, (p.predicted_us - p.measured_us) / p.measured_us AS rel_error
    FROM predictions p JOIN completed_runs r USING (run_id);

CREATE OR REPLACE VIEW v_overhead_versions AS
    SELECT o.* FROM overhead_versions o JOIN completed_runs r USING (run_id);
