-- Planner sweeps of completed runs (runs whose studies cover more than one GPU count), newest first: what the report plots against GPU count
SELECT run_id, count(*) AS studies, count(DISTINCT gpus) AS gpu_counts, min(gpus) AS min_gpus, max(gpus) AS max_gpus,
       string_agg(DISTINCT system_name, ',' ORDER BY system_name) AS systems, max(created_at) AS last_created
FROM v_plan_studies
GROUP BY run_id
HAVING count(DISTINCT gpus) > 1
ORDER BY last_created DESC;
