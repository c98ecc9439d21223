-- Traces and overheads of completed runs only. A trace counts when both its trace set's run and its own run
-- completed (a rank added to a set later by `pmdb collect trace --trace-set` has its own run).
CREATE OR REPLACE VIEW v_traces AS
    SELECT t.* FROM traces t JOIN v_trace_sets s USING (trace_set_id) JOIN completed_runs r ON r.run_id = t.run_id;

CREATE OR REPLACE VIEW v_trace_ops AS
    SELECT o.*, t.trace_set_id, t.rank, t.kind FROM trace_ops o JOIN v_traces t USING (trace_id);

CREATE OR REPLACE VIEW v_trace_kernels AS
    SELECT k.*, t.trace_set_id, t.rank FROM trace_kernels k JOIN v_traces t USING (trace_id);

CREATE OR REPLACE VIEW v_trace_iterations AS
    SELECT i.*, t.trace_set_id, t.rank FROM trace_iterations i JOIN v_traces t USING (trace_id);

-- Overhead statistics with their version's platform and semantics; the latest version of a platform is the
-- largest overhead_version.
CREATE OR REPLACE VIEW v_overheads AS
    SELECT o.*, v.platform, v.semantics, v.created_at FROM overheads o
    JOIN overhead_versions v USING (overhead_version) JOIN completed_runs r USING (run_id);
