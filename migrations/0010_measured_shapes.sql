-- 0010: exact-shape pricing (`pmdb predict --kernels measured`, the default from this release): an op whose exact
-- shape was microbenchmarked on the target platform at the predicted thread count is priced by that measurement's
-- median instead of a model (simulator/measured_shapes.py). A prediction records the choice and which
-- measurements were available, so it can be made again. Rows written before this migration were priced by models
-- alone: selection_kernels 'models' for model-mode rows, NULL for replay.

ALTER TABLE predictions ADD COLUMN selection_kernels VARCHAR;   -- model mode: 'measured' (exact shapes by their microbenchmarks) or 'models'
ALTER TABLE predictions ADD COLUMN measurements_upto BIGINT;    -- 'measured': the highest op_measurements.measurement_id of the target platform at prediction time
ALTER TABLE predictions ADD COLUMN measured_ops INTEGER;        -- model mode: ops priced by a measurement of their exact shape (0 with 'models')

UPDATE predictions SET selection_kernels = 'models', measured_ops = 0 WHERE mode = 'model';
