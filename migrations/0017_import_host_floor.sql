-- 0017: imported single-call kernel tables with the host floor removed. A NeuSight row's latency is ONE call
-- between two CUDA events: latency = max(F, c + d), F the table host's per-call floor, c the host time before the
-- kernel starts, d the kernel's device time (collectors/importers/launch_floor.py). From now on such a row's
-- median_us is d, its latency is kept in single_call_us (0015) and the table's F and c beside it. Rows imported
-- before are converted the same way: F = the 1 % quantile of the latencies of their (import run, op), c = 0.56 F,
-- d = max(latency - c, 0.1 latency) (the constants of launch_floor.py: FLOOR_QUANTILE, LEAD_SHARE,
-- MIN_DEVICE_SHARE). Other rows keep NULL: their median_us is a device time already (or a CPU time).

ALTER TABLE op_measurements ADD COLUMN host_floor_us DOUBLE;  -- imported single-call tables: the table's per-call host floor F (µs: the latency of a call whose kernel is hidden); NULL otherwise
ALTER TABLE op_measurements ADD COLUMN host_lead_us DOUBLE;   -- imported single-call tables: the host time c (µs) before the kernel starts, removed from single_call_us to give median_us; NULL otherwise

UPDATE op_measurements AS m
SET single_call_us = m.median_us, host_floor_us = f.floor_us, host_lead_us = 0.56 * f.floor_us,
    median_us = greatest(m.median_us - 0.56 * f.floor_us, 0.1 * m.median_us)
FROM (SELECT run_id, op, quantile_cont(median_us, 0.01) AS floor_us
      FROM op_measurements
      WHERE source = 'import' AND median_us > 0
        AND run_id IN (SELECT run_id FROM imported_files WHERE format = 'neusight')
      GROUP BY run_id, op) AS f
WHERE m.run_id = f.run_id AND m.op = f.op AND m.source = 'import' AND m.median_us > 0 AND m.host_floor_us IS NULL;
