-- Each run measured here: the host's compute pace at its truth against its prices' (collectors/wake_probe.py,
-- simulator/compute_phase.py): the median back-to-back time (µs) of the probed one-thread linear recorded with the
-- workload run and its completed relaunches (`pmdb collect relaunch`, whose launches are part of its truth), the
-- median over every completed `collect ops` run of its platform, their ratio (above 1: the CPU
-- was slower at the truth), and the latest model-mode prediction's error. Runs recorded without compute probes, and
-- probes of an op the platform's sweeps did not probe most, are left out.
WITH probes AS (
    SELECT CASE r.kind WHEN 'relaunch' THEN r.args->>'$.adds_to' ELSE r.run_id END AS run_id,
           CASE r.kind WHEN 'relaunch' THEN 'workload' ELSE r.kind END AS kind, r.platform, p.value->>'$.op' AS op,
           CAST(p.value->>'$.back_to_back_us' AS DOUBLE) AS back_us
    FROM collection_runs r, json_each(r.summary, '$.wake_probe') AS p
    WHERE r.status = 'completed' AND r.kind IN ('ops', 'workload', 'relaunch')
      AND CAST(p.value->>'$.back_to_back_us' AS DOUBLE) > 0
), probed AS (
    SELECT platform, mode(op) AS op FROM probes WHERE kind = 'ops' GROUP BY 1
), prices AS (
    SELECT platform, median(back_us) AS prices_us, count(*) AS prices_probes
    FROM probes JOIN probed USING (platform, op) WHERE kind = 'ops' GROUP BY 1
), truths AS (
    SELECT run_id, platform, median(back_us) AS truth_us, count(*) AS truth_probes
    FROM probes JOIN probed USING (platform, op) WHERE kind = 'workload' GROUP BY 1, 2
), latest AS (
    SELECT workload_run_id, rel_error FROM v_prediction_errors WHERE mode = 'model'
    QUALIFY row_number() OVER (PARTITION BY workload_run_id ORDER BY created_at DESC, prediction_id DESC) = 1
)
SELECT k.name AS workload, k.world_size AS ws, k.sharder, round(t.truth_us, 1) AS truth_us,
       round(p.prices_us, 1) AS prices_us, round(t.truth_us / p.prices_us, 3) AS pace,
       round(100 * l.rel_error, 2) AS error_pct, t.truth_probes, p.prices_probes, t.platform, t.run_id
FROM truths t
JOIN prices p USING (platform)
JOIN workload_runs w ON w.run_id = t.run_id
JOIN workloads k ON k.workload_id = w.workload_id
LEFT JOIN latest l ON l.workload_run_id = t.run_id
ORDER BY t.platform, k.name, k.world_size, k.sharder;
