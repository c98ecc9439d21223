-- 0013: a fourth cache state, 'loop'. An embedding lookup inside a training step finds in the caches what the
-- previous iteration's lookup and update left there (the hot rows of its index stream, the tables' page tables),
-- which neither a flushed ('cold') nor a repeated-batch ('warm') microbenchmark reproduces; `pmdb collect ops
-- --from-traces` now also times such lookups in a training loop of the lookup alone: a fresh batch from the same
-- index sources every repetition, the forward then the backward with its fused update, nothing flushed.
-- DuckDB cannot alter a CHECK constraint, so op_measurements is rebuilt with the same columns, ids and rows (and
-- embedding_batch_stats, whose foreign key points at it, around it); the sequences keep their values.

CREATE TEMPORARY TABLE keep_embedding_batch_stats AS SELECT * FROM embedding_batch_stats;
CREATE TEMPORARY TABLE keep_op_measurements AS SELECT * FROM op_measurements;
DROP TABLE embedding_batch_stats;
DROP INDEX idx_op_meas_key;
DROP TABLE op_measurements;

-- One microbenchmark (or imported) timing of one op config in one cache state (as in 0001 and 0004, with 'loop').
CREATE TABLE op_measurements (
    measurement_id BIGINT PRIMARY KEY DEFAULT nextval('seq_measurement_id'), -- row id
    run_id         VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    platform       VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    op             VARCHAR NOT NULL,        -- 'fully_connected', 'bmm', 'embedding_lookup', 'conv2d', 'relu', ...
    pass           VARCHAR NOT NULL CHECK (pass IN ('fwd', 'bwd')), -- fwd or bwd (backward includes the fused optimizer where there is one)
    implementation VARCHAR NOT NULL,        -- 'torch', 'fbgemm_tbe', 'torch_embedding_bag', ...
    dtype          VARCHAR NOT NULL,        -- 'float32', ...
    device         VARCHAR NOT NULL,        -- 'cpu', 'cuda:0'
    cache_state    VARCHAR NOT NULL CHECK (cache_state IN ('warm', 'cold', 'device', 'loop')), -- cold: caches flushed before each repetition; device: CUDA events; loop: in a training loop of the op alone (a fresh batch each repetition, forward then backward, nothing flushed; embedding lookups on CPUs)
    params         JSON NOT NULL,           -- the op's features (method.md section 3), numbers only, e.g. {"B":1,"M":64,"N":64,"K":64}; embedding_lookup: {"B","T","E":[..],"D":[..],"L":[measured mean per table]}
    config_key     VARCHAR NOT NULL,        -- sha256 of (op, pass, implementation, dtype, threads, canonical config incl. non-numeric settings such as index sources): resume key, shared by a config's rows in every cache state
    median_us      DOUBLE,                  -- NULL when skipped
    mean_us        DOUBLE,                                  -- mean over repetitions
    std_us         DOUBLE,                                  -- sample standard deviation
    min_us         DOUBLE,                                  -- fastest repetition
    repetitions    INTEGER,                 -- timed repetitions
    warmup         INTEGER,                 -- untimed warm-up repetitions
    threads        INTEGER,                 -- torch intra-op threads
    skipped        VARCHAR,                 -- NULL when measured; else the reason (memory cap, out of memory, ...)
    kernels        JSON,                    -- optional per-kernel breakdown [{"name":..., "us":...}] (--kernels)
    measured_at    TIMESTAMP NOT NULL DEFAULT current_timestamp, -- when it was measured
    source         VARCHAR DEFAULT 'microbenchmark', -- 'microbenchmark' (timed by pmdb collect ops), 'import' (pmdb collect import-ops) or 'trace' (mined from a stored GPU trace)
    trace_id       BIGINT,                  -- source 'trace': the Kineto trace (traces.trace_id) the op was timed in; NULL otherwise
    trace_op_id    BIGINT                   -- source 'trace': the op's Kineto trace_ops.op_id (one row per traced op instance); NULL otherwise
);
INSERT INTO op_measurements BY NAME SELECT * FROM keep_op_measurements;
CREATE INDEX idx_op_meas_key ON op_measurements(platform, config_key);

-- Per-table statistics of one embedding-lookup batch (microbenchmark config or workload iteration), as in 0001.
CREATE TABLE embedding_batch_stats (
    stat_id        BIGINT PRIMARY KEY DEFAULT nextval('seq_emb_stat_id'), -- row id
    run_id         VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    measurement_id BIGINT REFERENCES op_measurements(measurement_id), -- set for microbenchmark rows
    workload_id    BIGINT REFERENCES workloads(workload_id), -- set for workload iterations
    iteration      INTEGER,                 -- workload iteration index, NULL for microbenchmarks
    rank           INTEGER,                 -- rank holding the table, NULL for microbenchmarks
    table_index    INTEGER NOT NULL,        -- position of the table in the batched op
    batch_size     INTEGER NOT NULL,        -- B
    num_rows       BIGINT NOT NULL,         -- E
    dim            INTEGER NOT NULL,        -- D
    pooling_mean   DOUBLE NOT NULL,         -- L: measured mean lookups per sample
    reuse_factors  DOUBLE[17] NOT NULL,     -- share of unique indices looked up (0,1], (1,2], (2,4], ..., > 2^15 times (method.md section 5)
    index_source   VARCHAR,                 -- 'uniform', 'zipf:1.05', 'dataset:<file>', 'locality:<stats file>:<table>'
    optimizer      VARCHAR                  -- optimizer fused into the backward ('sgd', 'exact_sgd', 'adagrad', ...)
);
INSERT INTO embedding_batch_stats BY NAME SELECT * FROM keep_embedding_batch_stats;

DROP TABLE keep_op_measurements;
DROP TABLE keep_embedding_batch_stats;
