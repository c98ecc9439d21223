-- 0009: what-if derivations and the simulator rules a prediction was made under.
-- A derived trace set (source 'derived': a configuration that was not run, derived from a recorded trace set by
-- `pmdb predict --what-if` or a sharding study) names the trace set it was derived from and the transformation.
-- Its workload_id is the workload of the configuration it describes when that workload was run here, else its
-- parent's (so reports group it with the workload it came from). Rows written before this migration: NULL.
-- predictions.rules_version is simulator.semantics.RULES_VERSION at prediction time: `pmdb predict --all` makes a
-- prediction again when the rules changed since (NULL, before this migration: made again once).

ALTER TABLE trace_sets ADD COLUMN parent_trace_set_id BIGINT;  -- derived sets: the trace set they were derived from
ALTER TABLE trace_sets ADD COLUMN derivation JSON;             -- derived sets: what changed, e.g. {"batch_size": [8, 16], "world_size": [1, 2], "sharder": ["naive", "size_greedy"], "target_platform": "..."}
ALTER TABLE predictions ADD COLUMN rules_version INTEGER;      -- simulator.semantics.RULES_VERSION the prediction was made under
