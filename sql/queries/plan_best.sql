-- Best configuration of every planner study (completed runs): time per iteration vs GPUs per system
SELECT study_id, model_name, system_name, nvlink_domain, gpus, global_batch, strategy, best_strategy,
       best_time_s, best_throughput, best_memory_bytes / 1e9 AS best_memory_gb, best_config, evaluated, feasible,
       calibrated, created_at
FROM v_plan_studies
ORDER BY model_name, system_name, gpus, created_at;
