-- 0007: how an imported trace set ran, as far as the trace cannot say it itself. A trace records no intra-op thread
-- count (unless the recording process wrote it as the Kineto metadata `intra_op_threads`), and its iterations are
-- slowed by the profiler that recorded them (measured_us is that profiled time). `pmdb collect trace --threads N
-- --measured-ms X` stores both; NULL where unknown, and for every trace set stored before this migration.

ALTER TABLE trace_sets ADD COLUMN threads INTEGER;            -- intra-op threads per rank the traces were recorded with (Kineto metadata intra_op_threads, or collect trace --threads); NULL when unknown
ALTER TABLE trace_sets ADD COLUMN given_measured_us DOUBLE;   -- unprofiled per-iteration time given at import (collect trace --measured-ms), µs: the truth model-mode predictions of the set are judged against; NULL when not given
