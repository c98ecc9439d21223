-- Phase errors: model-mode predictions whose ground truth times the forward and the backward apart (imported GPU
-- labels: fw_us, bw_us of workload_runs, migration 0005). The step compared is fw + bw, as such labels time it. An
-- inference label (bw_us NULL: the model call alone) meets a prediction with no backward: its step is the forward,
-- and its backward error is NULL.
CREATE OR REPLACE VIEW v_phase_errors AS
    SELECT p.prediction_id, p.trace_set_id, p.workload_run_id, p.target_platform AS platform,
           coalesce(w.name, t.label) AS workload, w.batch_size, p.overhead_version,
           p.predicted_fw_us, wr.fw_us AS measured_fw_us, (p.predicted_fw_us - wr.fw_us) / wr.fw_us AS fw_rel_error,
           p.predicted_bw_us, wr.bw_us AS measured_bw_us, (p.predicted_bw_us - wr.bw_us) / wr.bw_us AS bw_rel_error,
           p.predicted_fw_us + coalesce(p.predicted_bw_us, 0) AS predicted_step_us,
           wr.fw_us + coalesce(wr.bw_us, 0) AS measured_step_us,
           (p.predicted_fw_us + coalesce(p.predicted_bw_us, 0) - wr.fw_us - coalesce(wr.bw_us, 0))
               / (wr.fw_us + coalesce(wr.bw_us, 0)) AS step_rel_error,
           wr.bw_us IS NULL AS inference,
           p.created_at
    FROM predictions p
    JOIN completed_runs r USING (run_id)
    JOIN trace_sets t USING (trace_set_id)
    JOIN workload_runs wr ON wr.run_id = p.workload_run_id
    LEFT JOIN workloads w ON w.workload_id = t.workload_id
    WHERE p.mode = 'model' AND p.predicted_fw_us IS NOT NULL AND wr.fw_us > 0
      AND ((p.predicted_bw_us IS NOT NULL AND wr.bw_us > 0)
           OR (p.predicted_bw_us IS NULL AND wr.bw_us IS NULL));
