-- 0004: where an op measurement comes from. Until now every op_measurements row was either timed here by a
-- microbenchmark sweep (`pmdb collect ops`) or imported (`pmdb collect import-ops`), told apart only by the kind of
-- the run that wrote it. Rows can now also be mined from the GPU kernels of a stored trace (`pmdb collect
-- mine-traces`): one row per traced op instance, pointing back at the Kineto op it was timed in. Existing rows get
-- 'import' when an import-ops run wrote them, else 'microbenchmark'.

ALTER TABLE op_measurements ADD COLUMN source VARCHAR DEFAULT 'microbenchmark'; -- 'microbenchmark' (timed by pmdb collect ops), 'import' (pmdb collect import-ops) or 'trace' (mined from a stored GPU trace)
ALTER TABLE op_measurements ADD COLUMN trace_id BIGINT;     -- source 'trace': the Kineto trace (traces.trace_id) the op was timed in; NULL otherwise
ALTER TABLE op_measurements ADD COLUMN trace_op_id BIGINT;  -- source 'trace': the op's Kineto trace_ops.op_id (one row per traced op instance); NULL otherwise

UPDATE op_measurements SET source = 'import'
WHERE run_id IN (SELECT run_id FROM collection_runs WHERE kind = 'import-ops');
UPDATE op_measurements SET source = 'microbenchmark' WHERE source IS NULL;
