-- Error statistics over completed runs (method.md section 2). |e| = |predicted - measured| / measured;
-- geomean |e| is the GMAE of pmdb.metrics (gmae_sql): exp(mean(ln(|e| + 4e-4))) - 4e-4, exactly |e| for one error.

-- Kernel and collective models: held-out test errors per registered version, with their aliases.
CREATE OR REPLACE VIEW v_kernel_model_errors AS
    SELECT m.platform, m.op, m.pass, m.family, m.name, m.version, m.world_size, m.implementation, m.cache_state,
           m.test_gmae, m.test_mape, m.test_std, m.n_train, m.n_test,
           (SELECT string_agg(a.alias, ',' ORDER BY a.alias) FROM model_aliases a
             WHERE a.name = m.name AND a.version = m.version) AS aliases,
           m.created_at
    FROM model_versions m LEFT JOIN collection_runs r USING (run_id)
    WHERE m.run_id IS NULL OR r.status = 'completed';

-- One row per prediction that has ground truth: the latest prediction of each (trace set, mode, model set,
-- target platform, overhead version), with its workload's family and shape, its error and its baseline's error.
-- in_sample: a model version it used was trained on this trace set's own run, on the ground truth it is judged
-- against, or on another run of the same workload (the same shape and plan recorded again, e.g. calibration runs
-- of a random sharder whose seeds drew one plan). An in-context collective term (`pmdb fit comms-context`) learns
-- from workload traces and, with --target step, from their measured times. Such an error is not a held-out one,
-- and the error tables (v_e2e_errors, `pmdb errors`, the summary, the report) leave it out.
-- self_priced: a model-mode prediction more than half of whose work (self_priced_share, simulator.store_rows'
-- SELF_PRICED_LIMIT) kept the traced time of the very trace it predicts: replay, not a model; left out the same way.
CREATE OR REPLACE VIEW v_prediction_errors AS
    SELECT p.prediction_id, p.trace_set_id, p.workload_run_id, p.source_platform, p.target_platform AS platform,
           p.mode, coalesce(p.model_set, '(trace durations)') AS model_set,
           CASE WHEN p.mode = 'replay' THEN 'replay'
                WHEN p.selection_spec IS NOT NULL
                THEN p.selection_spec || '/' || p.selection_cache_state || '/' || p.selection_digest
                     || CASE WHEN p.selection_kernels = 'measured' THEN '/measured' ELSE '' END
                     || CASE WHEN p.comm_shares_core THEN '/comm-shares-core' ELSE '' END
                ELSE 'set-' || left(md5(p.model_set), 8) END AS model_set_id,
           p.overhead_version,
           coalesce(w.family, 'other') AS family, coalesce(w.name, t.label) AS workload, t.world_size,
           w.batch_size, w.sharder, p.predicted_us, p.measured_us, p.baseline_us, p.device_active_us,
           p.comm_unoverlapped_frac,
           (p.predicted_us - p.measured_us) / p.measured_us AS rel_error,
           abs(p.predicted_us - p.measured_us) / p.measured_us AS abs_error,
           (p.baseline_us - p.measured_us) / p.measured_us AS baseline_rel_error,
           abs(p.baseline_us - p.measured_us) / p.measured_us AS baseline_abs_error,
           p.elapsed_s, p.created_at, p.self_priced_share,
           (p.mode = 'model' AND coalesce(p.self_priced_share, 0) > 0.5) AS self_priced,
           EXISTS (SELECT 1 FROM model_versions m
                   WHERE m.family = 'in_context'
                     AND (list_contains(m.data_runs, t.run_id) OR list_contains(m.data_runs, p.workload_run_id)
                          OR EXISTS (SELECT 1 FROM workload_runs d WHERE list_contains(m.data_runs, d.run_id)
                                                                      AND d.workload_id = t.workload_id))
                     AND list_contains(string_split(p.model_set, ','), m.name || ':' || m.version)) AS in_sample
    FROM predictions p
    JOIN completed_runs r USING (run_id)
    JOIN trace_sets t USING (trace_set_id)
    LEFT JOIN workloads w ON w.workload_id = t.workload_id
    WHERE p.measured_us IS NOT NULL AND p.measured_us > 0
    QUALIFY row_number() OVER (PARTITION BY p.trace_set_id, p.mode, p.model_set, p.selection_spec, p.selection_cache_state,
                                            p.selection_digest, p.selection_kernels, p.comm_shares_core,
                                            p.target_platform,
                                            p.overhead_version, p.workload_run_id
                               ORDER BY p.created_at DESC, p.prediction_id DESC) = 1;

-- E2E errors by platform, workload family, world size, mode and model-version set. model_set_id is the selection
-- ('<--models spec>/<cache state>/<digest of every version selected>[/measured]', from the selection_* columns), shared by the workloads predicted with
-- the same champions; v_prediction_errors keeps model_set, the versions each prediction actually used.
CREATE OR REPLACE VIEW v_e2e_errors AS
    SELECT platform, family, world_size, mode, model_set_id,
           count(*) AS n,
           (exp(avg(ln(abs_error + 4e-4))) - 4e-4) AS geomean_abs_error,
           min(abs_error) AS min_abs_error,
           max(abs_error) AS max_abs_error,
           avg(abs_error) AS mape,
           avg(rel_error) AS mean_rel_error,
           (exp(avg(ln(baseline_abs_error + 4e-4))) - 4e-4) AS baseline_geomean_abs_error
    FROM v_prediction_errors
    WHERE NOT in_sample AND NOT self_priced
    GROUP BY platform, family, world_size, mode, model_set_id;
