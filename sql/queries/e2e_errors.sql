-- E2E prediction errors by platform, workload family, world size, mode and model-version set (geomean |e|, min, max, n)
SELECT platform, family, world_size, mode, model_set_id, n,
       round(100 * geomean_abs_error, 2) AS geomean_pct,
       round(100 * min_abs_error, 2) AS min_pct,
       round(100 * max_abs_error, 2) AS max_pct,
       round(100 * baseline_geomean_abs_error, 2) AS baseline_geomean_pct
FROM v_e2e_errors
ORDER BY platform, family, world_size, mode, model_set_id;
