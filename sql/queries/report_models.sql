-- Kernel, embedding and collective models shown by the report: per registered name its champion (else latest) version of a completed fit, with the held-out error histogram and fitted parameters
WITH ok AS (
    SELECT m.* FROM model_versions m LEFT JOIN collection_runs r USING (run_id)
    WHERE m.run_id IS NULL OR r.status = 'completed'),
champion AS (SELECT name, version FROM model_aliases WHERE alias = 'champion'),
pick AS (
    SELECT ok.*, c.name IS NOT NULL AS is_champion,
           row_number() OVER (PARTITION BY ok.name ORDER BY c.name IS NOT NULL DESC, ok.version DESC) AS k
    FROM ok LEFT JOIN champion c ON c.name = ok.name AND c.version = ok.version)
SELECT platform, op, pass, world_size, cache_state, implementation, dtype, family, name, version, is_champion,
       test_gmae, test_mape, test_std, n_train, n_test, test_error_hist, params
FROM pick WHERE k = 1
ORDER BY platform, world_size NULLS FIRST, op, pass, cache_state, name;
