-- Kernel/collective model test errors (held-out split) by platform, op, pass, family and version
SELECT platform, op, pass, world_size, family, name, version, aliases, cache_state,
       round(100 * test_gmae, 2) AS test_gmae_pct, round(100 * test_mape, 2) AS test_mape_pct,
       round(100 * test_std, 2) AS test_std_pct, n_train, n_test
FROM v_kernel_model_errors
ORDER BY platform, op, pass, world_size, family, version;
