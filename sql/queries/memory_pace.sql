-- Each CPU run measured here: the host's memory pace at its truth against its prices' (collectors/memory_probe.py,
-- simulator/memory_phase.py): the median 64 MiB read (µs) recorded with the workload run and its completed
-- relaunches (`pmdb collect relaunch`, whose launches are part of its truth), the median over every
-- completed `collect ops` run of its platform (both in ms here), their ratio (above 1: memory was slower at the
-- truth), and the latest model-mode prediction's error. Runs recorded without probes are left out.
WITH probes AS (
    SELECT CASE r.kind WHEN 'relaunch' THEN r.args->>'$.adds_to' ELSE r.run_id END AS run_id,
           CASE r.kind WHEN 'relaunch' THEN 'workload' ELSE r.kind END AS kind, r.platform,
           CAST(p.value->>'$.read_us' AS DOUBLE) AS read_us
    FROM collection_runs r, json_each(r.summary, '$.memory_probe') AS p
    WHERE r.status = 'completed' AND r.kind IN ('ops', 'workload', 'relaunch')
      AND CAST(p.value->>'$.bytes' AS BIGINT) = 67108864
), prices AS (
    SELECT platform, median(read_us) AS prices_read_us, count(*) AS prices_probes
    FROM probes WHERE kind = 'ops' GROUP BY 1
), truths AS (
    SELECT run_id, platform, median(read_us) AS truth_read_us, count(*) AS truth_probes
    FROM probes WHERE kind = 'workload' GROUP BY 1, 2
), latest AS (
    SELECT workload_run_id, rel_error FROM v_prediction_errors WHERE mode = 'model'
    QUALIFY row_number() OVER (PARTITION BY workload_run_id ORDER BY created_at DESC, prediction_id DESC) = 1
)
SELECT k.name AS workload, k.world_size AS ws, k.sharder,
       round(t.truth_read_us / 1000, 3) AS truth_read_ms, round(p.prices_read_us / 1000, 3) AS prices_read_ms,
       round(t.truth_read_us / p.prices_read_us, 3) AS pace, round(100 * l.rel_error, 2) AS error_pct,
       t.truth_probes, p.prices_probes, t.platform, t.run_id
FROM truths t
JOIN prices p USING (platform)
JOIN workload_runs w ON w.run_id = t.run_id
JOIN workloads k ON k.workload_id = w.workload_id
LEFT JOIN latest l ON l.workload_run_id = t.run_id
ORDER BY t.platform, k.name, k.world_size, k.sharder;
