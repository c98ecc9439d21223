-- Each prediction with ground truth beside the baseline (max over streams of summed kernel time), errors in %;
-- in_sample: priced by an in-context collective version trained on the run's own traces (not a held-out error);
-- self_priced: model mode, but most of the work kept the trace's own times (replay, not a model)
SELECT prediction_id, platform, family, workload, world_size, batch_size, sharder, mode, model_set_id,
       round(measured_us / 1000, 3) AS measured_ms, round(predicted_us / 1000, 3) AS predicted_ms,
       round(baseline_us / 1000, 3) AS baseline_ms,
       round(100 * rel_error, 2) AS error_pct, round(100 * baseline_rel_error, 2) AS baseline_error_pct,
       in_sample, self_priced
FROM v_prediction_errors
ORDER BY platform, family, workload, world_size, batch_size, mode, model_set_id, prediction_id;  -- ties: oldest first
