-- 0005: phases and provenance of a workload's ground truth. A measured run (`pmdb collect workload`) times whole
-- iterations on this machine; a run can now also be imported (`pmdb collect import-e2e`: e.g. NeuSight's GPU labels,
-- which time the forward and the backward of a training step separately). measured_us stays the whole step (for an
-- imported label its e2e time, forward + backward); the phases are NULL where the source does not time them.
-- Existing rows are measured runs.

ALTER TABLE workload_runs ADD COLUMN fw_us DOUBLE;         -- forward phase of one step (the model call), µs; NULL when not timed apart
ALTER TABLE workload_runs ADD COLUMN bw_us DOUBLE;         -- backward phase of one step (loss.backward()), µs; NULL when not timed apart
ALTER TABLE workload_runs ADD COLUMN source VARCHAR DEFAULT 'measured'; -- 'measured' (timed here by pmdb collect workload) or 'imported' (pmdb collect import-e2e)
ALTER TABLE workload_runs ADD COLUMN source_file VARCHAR;  -- source 'imported': sha256 of the imported file (imported_files); NULL when measured

UPDATE workload_runs SET source = 'measured' WHERE source IS NULL;
