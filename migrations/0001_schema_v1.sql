-- pmdb schema v1: everything the collectors, fitters, simulator and planner store.
--
-- Conventions used by every table:
--   * times are microseconds (suffix _us) unless a column says otherwise; sizes are bytes (suffix _bytes);
--   * bandwidths are GB/s (1e9 bytes per second, suffix _gbps); rates are per second;
--   * free-form structured values (arguments, configurations, parameters) are JSON with numbers as numbers,
--     so SQL (`params->>'$.B'`) and pandas read them back without parsing strings;
--   * every measured row points at the collection run that produced it; rows of runs whose status is not
--     'completed' never count: the views in sql/views/ filter on completed runs, and so must every query.
-- Foreign keys are declared everywhere a row points at another table.

CREATE SEQUENCE seq_measurement_id START 1;
CREATE SEQUENCE seq_collective_id START 1;
CREATE SEQUENCE seq_emb_stat_id START 1;
CREATE SEQUENCE seq_workload_id START 1;
CREATE SEQUENCE seq_trace_set_id START 1;
CREATE SEQUENCE seq_trace_id START 1;
CREATE SEQUENCE seq_overhead_version START 1;
CREATE SEQUENCE seq_prediction_id START 1;
CREATE SEQUENCE seq_task_id START 1;
CREATE SEQUENCE seq_study_id START 1;
CREATE SEQUENCE seq_plan_study_id START 1;

-- A machine (or an imported, remote machine) that measurements are tagged with.
CREATE TABLE platforms (
    name             VARCHAR PRIMARY KEY,  -- readable name, e.g. 'cpu-amd-epyc-7b13-2c'; overridable with --platform
    fingerprint      VARCHAR,              -- sha256 of the stable hardware facts; NULL for imported platforms
    device_kind      VARCHAR NOT NULL CHECK (device_kind IN ('cpu', 'cuda')), -- cpu or cuda
    semantics        VARCHAR NOT NULL CHECK (semantics IN ('sync_host', 'async_device')), -- execution semantics the simulator uses
    cpu_model        VARCHAR,              -- /proc/cpuinfo model name
    cpu_cores        INTEGER,              -- logical CPUs usable by this process
    threads          INTEGER,              -- torch intra-op threads in use when registered
    memory_bytes     BIGINT,               -- host memory
    gpu_name         VARCHAR,              -- CUDA device name (NULL on cpu)
    gpu_count        INTEGER,              -- CUDA devices visible
    gpu_memory_bytes BIGINT,               -- memory of one CUDA device
    driver_version   VARCHAR,              -- NVIDIA driver version
    cuda_version     VARCHAR,              -- CUDA runtime version torch was built with
    interconnect     VARCHAR,              -- `nvidia-smi topo -m` output, or free topology text for imported platforms
    torch_version    VARCHAR,                               -- torch version at registration
    fbgemm_version   VARCHAR,                               -- fbgemm-gpu(-cpu) version, NULL if absent
    hostname         VARCHAR,                               -- host name of the machine
    is_imported      BOOLEAN NOT NULL DEFAULT FALSE, -- TRUE when the platform was named for imported data, not detected
    details          JSON,                 -- everything else detected (python version, OS, flags)
    registered_at    TIMESTAMP NOT NULL DEFAULT current_timestamp -- first registration time
);

-- One invocation of a collector, importer, fitter, simulator or planner that writes rows.
-- Lifecycle: running -> completed | failed | interrupted. A run left 'running' by a killed process is marked
-- 'interrupted' the next time the store is opened for writing.
CREATE TABLE collection_runs (
    run_id        VARCHAR PRIMARY KEY,     -- uuid4 hex
    kind          VARCHAR NOT NULL,        -- 'ops', 'comms', 'import-comms', 'workload', 'trace', 'peaks', 'fit', 'overheads', 'predict', 'plan', ...
    platform      VARCHAR REFERENCES platforms(name), -- platform the rows are tagged with
    args          JSON,                    -- the command's arguments, as given
    command       VARCHAR,                 -- the command line that started the run
    pmdb_version  VARCHAR NOT NULL,                         -- pmdb version that ran it
    git_revision  VARCHAR,                 -- git HEAD of the pmdb checkout, if it is one
    hostname      VARCHAR,                                  -- host name of the machine
    pid           INTEGER,                 -- process id of the writer (stale 'running' runs are detected with it)
    started_at    TIMESTAMP NOT NULL DEFAULT current_timestamp, -- when the run started
    status        VARCHAR NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'completed', 'failed', 'interrupted')), -- running, completed, failed or interrupted
    finished_at   TIMESTAMP,               -- when the status left 'running'
    error         VARCHAR,                 -- one-line reason for failed/interrupted runs
    summary       JSON                     -- counts the run reports (rows written, configs skipped, ...)
);

-- Peak numbers a roofline needs, measured per platform (several measurements over time; views take the latest).
CREATE TABLE platform_peaks (
    platform    VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    run_id      VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    metric      VARCHAR NOT NULL,          -- 'gemm_flops' (FLOP/s), 'mem_bw' (bytes/s), 'h2d_bw', 'd2h_bw' (bytes/s)
    dtype       VARCHAR,                   -- data type of the measurement ('float32', ...)
    value       DOUBLE NOT NULL,           -- in the unit of the metric (per second)
    details     JSON,                      -- sizes used, repetitions, thread count
    measured_at TIMESTAMP NOT NULL DEFAULT current_timestamp -- when it was measured
);

-- One timed kernel/op configuration from a microbenchmark sweep.
CREATE TABLE op_measurements (
    measurement_id BIGINT PRIMARY KEY DEFAULT nextval('seq_measurement_id'), -- row id
    run_id         VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    platform       VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    op             VARCHAR NOT NULL,        -- 'fully_connected', 'bmm', 'embedding_lookup', 'conv2d', 'relu', ...
    pass           VARCHAR NOT NULL CHECK (pass IN ('fwd', 'bwd')), -- fwd or bwd (backward includes the fused optimizer where there is one)
    implementation VARCHAR NOT NULL,        -- 'torch', 'fbgemm_tbe', 'torch_embedding_bag', ...
    dtype          VARCHAR NOT NULL,        -- 'float32', ...
    device         VARCHAR NOT NULL,        -- 'cpu', 'cuda:0'
    cache_state    VARCHAR NOT NULL CHECK (cache_state IN ('warm', 'cold', 'device')), -- cold: caches flushed before each repetition; device: CUDA events
    params         JSON NOT NULL,           -- the op's features (method.md section 3), numbers only, e.g. {"B":1,"M":64,"N":64,"K":64}; embedding_lookup: {"B","T","E":[..],"D":[..],"L":[measured mean per table]}
    config_key     VARCHAR NOT NULL,        -- sha256 of (op, pass, implementation, dtype, threads, canonical config incl. non-numeric settings such as index sources): resume key, shared by a config's warm and cold rows
    median_us      DOUBLE,                  -- NULL when skipped
    mean_us        DOUBLE,                                  -- mean over repetitions
    std_us         DOUBLE,                                  -- sample standard deviation
    min_us         DOUBLE,                                  -- fastest repetition
    repetitions    INTEGER,                 -- timed repetitions
    warmup         INTEGER,                 -- untimed warm-up repetitions
    threads        INTEGER,                 -- torch intra-op threads
    skipped        VARCHAR,                 -- NULL when measured; else the reason (memory cap, out of memory, ...)
    kernels        JSON,                    -- optional per-kernel breakdown [{"name":..., "us":...}] (--kernels)
    measured_at    TIMESTAMP NOT NULL DEFAULT current_timestamp -- when it was measured
);
CREATE INDEX idx_op_meas_key ON op_measurements(platform, config_key);

-- One message size of one collective sweep (measured here or imported).
CREATE TABLE collective_measurements (
    collective_id    BIGINT PRIMARY KEY DEFAULT nextval('seq_collective_id'), -- row id
    run_id           VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    platform         VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    collective       VARCHAR NOT NULL,      -- 'all_reduce', 'all_to_all', 'all_to_allv', 'all_gather', 'reduce_scatter'
    backend          VARCHAR NOT NULL,      -- 'gloo', 'nccl', or the importer's label
    world_size       INTEGER NOT NULL,                      -- number of ranks
    dtype            VARCHAR,                               -- element type (float32, ...)
    in_place         BOOLEAN,               -- nccl-tests reports both; NULL when not stated
    split_kind       VARCHAR NOT NULL CHECK (split_kind IN ('equal', 'random')), -- equal per-rank sizes, or seeded random splits (all_to_allv)
    rank             INTEGER,               -- rank r's own latencies over iterations; NULL = the aggregate row curves and fits read (measured: per iteration the slowest rank, then statistics over iterations; imports: the source's own figures)
    total_bytes      BIGINT NOT NULL,       -- sum over ranks of their input-buffer bytes (sum of sent_bytes)
    bytes_per_rank   BIGINT,                -- per-rank input-buffer bytes when equal on all ranks, else NULL
    max_rank_bytes   BIGINT NOT NULL,       -- max over ranks of max(sent, received) bytes: the model's message size; for equal splits the 'size' of PARAM and nccl-tests (the algbw numerator)
    sent_bytes       BIGINT[],              -- per rank: bytes of its input buffer, own chunk included (all_gather: size/n, others: size)
    recv_bytes       BIGINT[],              -- per rank: bytes of its output buffer, own chunk included (reduce_scatter: size/n, others: size)
    iterations       INTEGER,                               -- timed iterations
    warmup           INTEGER,                               -- untimed warm-up iterations
    threads_per_rank INTEGER,                               -- torch intra-op threads per rank
    lat_p50_us       DOUBLE NOT NULL,       -- median latency over iterations (nccl-tests imports: its average time, the only central value it reports)
    lat_p95_us       DOUBLE,                                -- 95th percentile latency
    lat_min_us       DOUBLE,                                -- fastest iteration
    lat_max_us       DOUBLE,                                -- slowest iteration
    algbw_gbps       DOUBLE,                -- max_rank_bytes / lat_p50 (imports: the source's figure when it gives one)
    busbw_gbps       DOUBLE,                -- algbw x bus factor (method.md section 4; imports: the source's figure)
    source           VARCHAR NOT NULL,      -- 'measured', 'param', 'nccl-tests'
    source_file      VARCHAR                -- sha256 of the imported file (imported_files), NULL when measured
);

-- Files imported from elsewhere, by content hash (importing the same content twice is refused).
CREATE TABLE imported_files (
    sha256      VARCHAR PRIMARY KEY,                        -- content hash
    run_id      VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    path        VARCHAR NOT NULL,           -- path as given at import time
    format      VARCHAR NOT NULL,           -- 'param', 'nccl-tests', 'kineto', 'et', ...
    platform    VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    size_bytes  BIGINT,                                     -- file size
    imported_at TIMESTAMP NOT NULL DEFAULT current_timestamp -- when it was imported
);

-- Random DLRM tasks for sharding studies (method.md section 8).
CREATE TABLE tasks (
    task_id     BIGINT PRIMARY KEY DEFAULT nextval('seq_task_id'), -- row id
    kind        VARCHAR NOT NULL CHECK (kind IN ('heavy', 'normal')), -- heavy (all tables heavy, L >= 20) or normal
    seed        BIGINT NOT NULL,                            -- seed of the generator
    world_size  INTEGER NOT NULL,                           -- number of ranks
    tables      JSON NOT NULL,              -- [{"num_rows":E,"dim":D,"pooling":L,"source":...}, ...]
    memory_cap_bytes BIGINT,                                -- bytes all tables of the task fit in together (80% of the memory given)
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- A training workload shape (DLRM preset/config or transformer architecture) at a batch size and world size.
CREATE TABLE workloads (
    workload_id  BIGINT PRIMARY KEY DEFAULT nextval('seq_workload_id'), -- workload shape
    family       VARCHAR NOT NULL CHECK (family IN ('dlrm', 'transformer', 'other')), -- dlrm, transformer or other
    name         VARCHAR NOT NULL,          -- preset or architecture ('dlrm_test', 'gpt2', ...)
    config       JSON NOT NULL,             -- the full shape (layers, tables, sequence length, ...)
    config_hash  VARCHAR NOT NULL,          -- sha256 of the canonical config, batch size, world size and sharding
    batch_size   INTEGER NOT NULL,          -- global batch size
    world_size   INTEGER NOT NULL,                          -- number of ranks
    sharder      VARCHAR,                   -- DLRM table sharder ('naive', ..., 'file')
    sharding     JSON,                      -- DLRM plan: table index -> rank
    task_id      BIGINT REFERENCES tasks(task_id),          -- row id
    created_at   TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- Per-table statistics of one embedding-lookup batch (microbenchmark config or workload iteration).
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

-- One measured (ground-truth) execution of a workload on a platform.
CREATE TABLE workload_runs (
    run_id       VARCHAR PRIMARY KEY REFERENCES collection_runs(run_id), -- collection run that wrote the row
    workload_id  BIGINT NOT NULL REFERENCES workloads(workload_id), -- workload shape
    platform     VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    iterations   INTEGER NOT NULL,          -- measured iterations
    warmup       INTEGER NOT NULL,                          -- untimed warm-up iterations
    threads      INTEGER,                   -- intra-op threads per rank
    allocator    JSON,                      -- allocator settings (MALLOC_* environment) in force
    measured_us  DOUBLE,                    -- median over iterations of the max over ranks
    spread       DOUBLE                     -- (p90 - p10) / median of the per-iteration max over ranks
);

-- Per-iteration, per-rank wall time of a workload run (no profiler).
CREATE TABLE e2e_measurements (
    run_id    VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    iteration INTEGER NOT NULL,                             -- iteration index (0-based, after warm-up)
    rank      INTEGER NOT NULL,                             -- rank (0-based)
    time_us   DOUBLE NOT NULL,                              -- wall time of the iteration on that rank
    PRIMARY KEY (run_id, iteration, rank)
);

-- A group of traces, one or two per rank, of the same program (what the simulator predicts from).
CREATE TABLE trace_sets (
    trace_set_id BIGINT PRIMARY KEY DEFAULT nextval('seq_trace_set_id'), -- trace set
    run_id       VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    platform     VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    label        VARCHAR,                   -- workload label given at import, or the workload name
    workload_id  BIGINT REFERENCES workloads(workload_id),  -- workload shape
    world_size   INTEGER NOT NULL,                          -- number of ranks
    source       VARCHAR NOT NULL CHECK (source IN ('captured', 'imported', 'derived')), -- captured by pmdb, imported, or derived (sharding study)
    measured_us  DOUBLE,                    -- the trace's own median iteration time, when it holds several iterations
    created_at   TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- One trace file, stored gzipped and content-addressed under artifacts/traces/<sha256>.json.gz.
CREATE TABLE traces (
    trace_id       BIGINT PRIMARY KEY DEFAULT nextval('seq_trace_id'), -- trace file
    trace_set_id   BIGINT NOT NULL REFERENCES trace_sets(trace_set_id), -- trace set
    run_id         VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- run that stored this file (a rank added to a set later has its own)
    rank           INTEGER NOT NULL,                        -- rank the trace was recorded on
    kind           VARCHAR NOT NULL CHECK (kind IN ('kineto', 'et')), -- kineto (timed events) or et (execution trace graph)
    schema_version VARCHAR,                 -- ET schema ('1.1.1-chakra.0.0.4'), Kineto schemaVersion
    sha256         VARCHAR NOT NULL,        -- of the uncompressed content
    path           VARCHAR NOT NULL,        -- relative to the workspace
    size_bytes     BIGINT,                  -- uncompressed size
    profiled_with  VARCHAR,                 -- 'kineto', 'et', 'kineto+et': what was recording during the pass
    iterations     INTEGER,                 -- complete iterations the trace delimits (Kineto: trace_iterations rows; ET: marker count)
    link_method    VARCHAR,                 -- et rows: how nodes were linked to the rank's Kineto ops ('rf_id', 'external_id', 'op_order'); NULL if not linked
    linked_ops     BIGINT                   -- et rows: nodes linked to a Kineto op
);

-- Ops parsed from traces, format-independent. Kineto rows: every CPU-side complete event (cpu_op,
-- user_annotation, python_function, cuda_runtime/cuda_driver calls), op_id = position in start order.
-- ET rows: every node, op_id = ET node id (sorted ids = start order); a node linked to a Kineto op carries that
-- op's timing, thread and category, and its parent follows the Kineto nesting where the two disagree.
CREATE TABLE trace_ops (
    trace_id      BIGINT NOT NULL REFERENCES traces(trace_id), -- trace file
    op_id         BIGINT NOT NULL,          -- ET node id, or Kineto event position in start order (0-based)
    name          VARCHAR NOT NULL,                         -- op name (aten::addmm, c10d::allreduce_, ...)
    parent_id     BIGINT,                   -- enclosing op: Kineto nesting on the same thread; ET ctrl_deps unless the linked Kineto nesting disagrees
    thread        BIGINT,                   -- OS thread id from Kineto (ET rows: that of the linked Kineto op, NULL when unlinked)
    et_tid        INTEGER,                  -- ET rows: the ET's own thread number (1 = first thread seen); NULL on Kineto rows
    iteration     INTEGER,                  -- iteration index the op belongs to (ProfilerStep span, or optimizer-step period), NULL outside
    start_us      DOUBLE,                   -- Kineto timestamp, µs (NULL for unlinked ET ops)
    dur_us        DOUBLE,                   -- Kineto duration, µs
    rf_id         BIGINT,                   -- record-function id (ET rf_id; Kineto 'Record function id' when the trace has it)
    linked_op_id  BIGINT,                   -- the same op in the rank's other trace: ET rows -> Kineto op_id, Kineto rows -> ET node id
    category      VARCHAR,                  -- Kineto category ('cpu_op', 'user_annotation', 'cuda_runtime', ...); unlinked ET nodes: 'cpu_op', 'user_annotation' or 'et_root'
    is_collective BOOLEAN NOT NULL DEFAULT FALSE,           -- TRUE for communication collectives (c10d::*, gloo:*, nccl:*, record_param_comms)
    input_shapes  JSON,                                     -- shapes of the inputs, one entry per argument (nested lists)
    output_shapes JSON,                                     -- shapes of the outputs (ET only)
    input_tensors JSON,                     -- [[arg, tensor_id, storage_id, offset, numel, itemsize, device], ...] (ET only; arg = argument position)
    output_tensors JSON,                                    -- output tensor values, same layout as input_tensors
    attrs         JSON,                     -- op_schema, input/output types, scalar inputs, seq_id, external_id, correlation, ...
    PRIMARY KEY (trace_id, op_id)
);

-- Device-side events of GPU traces (kernels, memcpy, memset) and the launches that made them.
CREATE TABLE trace_kernels (
    trace_id     BIGINT NOT NULL REFERENCES traces(trace_id), -- trace file
    kernel_index BIGINT NOT NULL,           -- order in the trace
    name         VARCHAR NOT NULL,                          -- kernel name
    category     VARCHAR NOT NULL,          -- 'kernel', 'gpu_memcpy', 'gpu_memset', 'cuda_sync'
    device       INTEGER,                                   -- device index
    stream       BIGINT,                                    -- CUDA stream id
    correlation  BIGINT,                    -- links to the cuda_runtime launch
    op_id        BIGINT,                    -- the innermost CPU op (Kineto trace_ops.op_id) around the launch call, when linked
    launch_op_id BIGINT,                    -- the launch call itself (Kineto trace_ops.op_id of the cuda_runtime/cuda_driver event)
    launch_name  VARCHAR,                   -- 'cudaLaunchKernel', 'cudaMemcpyAsync', ...
    launch_start_us DOUBLE,                                 -- start of the launch call
    launch_dur_us DOUBLE,                                   -- duration of the launch call (T4)
    start_us     DOUBLE NOT NULL,                           -- start timestamp
    dur_us       DOUBLE NOT NULL,                           -- duration
    is_collective BOOLEAN NOT NULL DEFAULT FALSE,           -- TRUE for communication collectives
    PRIMARY KEY (trace_id, kernel_index)
);

-- Complete iterations found in a Kineto trace: the trace's own (profiled) per-iteration times. Either each
-- ProfilerStep#N annotation, or the period between the ends of consecutive optimizer steps (the partial periods
-- before the first and after the last marker are not rows).
CREATE TABLE trace_iterations (
    trace_id  BIGINT NOT NULL REFERENCES traces(trace_id),  -- trace file
    iteration INTEGER NOT NULL,                             -- iteration index within the trace (trace_ops.iteration)
    start_us  DOUBLE NOT NULL,                              -- start timestamp, µs
    dur_us    DOUBLE NOT NULL,                              -- duration, µs
    marker    VARCHAR,                      -- the event name that delimits it ('ProfilerStep#3', 'Optimizer.step#SGD.step')
    PRIMARY KEY (trace_id, iteration)
);

-- A version of the overhead table of a platform (pooled over its traces).
CREATE TABLE overhead_versions (
    overhead_version BIGINT PRIMARY KEY DEFAULT nextval('seq_overhead_version'), -- overhead table version
    run_id       VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    platform     VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    semantics    VARCHAR NOT NULL,          -- 'async_device' (T1-T5 from launches) or 'sync_host' (CPU analogue)
    trace_ids    BIGINT[],                  -- traces the samples came from
    params       JSON,                      -- extraction settings: T1 window (µs), IQR factor, joint Kineto+ET passes included, op scope
    created_at   TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- Raw overhead samples (before outlier filtering).
CREATE TABLE overhead_samples (
    overhead_version BIGINT NOT NULL REFERENCES overhead_versions(overhead_version), -- overhead table version
    trace_id  BIGINT NOT NULL REFERENCES traces(trace_id),  -- trace file
    op_name   VARCHAR NOT NULL,             -- op name, or launch API name for T4
    kind      VARCHAR NOT NULL CHECK (kind IN ('T1', 'T2', 'T3', 'T4', 'T5')), -- T1..T5 (method.md section 6)
    op_id     BIGINT,                       -- Kineto trace_ops.op_id of the op the sample belongs to (T4: the launch call)
    value_us  DOUBLE NOT NULL                               -- the sample, µs (negatives clamped to 0)
);

-- IQR-filtered overhead statistics per op name and kind.
CREATE TABLE overheads (
    overhead_version BIGINT NOT NULL REFERENCES overhead_versions(overhead_version), -- overhead table version
    op_name  VARCHAR NOT NULL,                              -- op name
    kind     VARCHAR NOT NULL CHECK (kind IN ('T1', 'T2', 'T3', 'T4', 'T5')), -- T1..T5 (method.md section 6)
    mean_us  DOUBLE NOT NULL,                               -- mean after IQR filtering
    std_us   DOUBLE,                                        -- std after IQR filtering
    count    INTEGER NOT NULL,                              -- samples kept after IQR filtering
    PRIMARY KEY (overhead_version, op_name, kind)
);

-- Mirror of each MLflow registered model version (kernel, embedding and collective models).
CREATE TABLE model_versions (
    name           VARCHAR NOT NULL,        -- 'pmdb.<platform>.<op>.<pass>[.<implementation>][.<dtype>].<cache_state>' or 'pmdb.<platform>.<collective>.ws<N>'
    version        INTEGER NOT NULL,                        -- registry version number
    mlflow_run_id  VARCHAR NOT NULL,                        -- MLflow run that logged the model
    run_id         VARCHAR REFERENCES collection_runs(run_id), -- the pmdb fit run
    platform       VARCHAR NOT NULL REFERENCES platforms(name), -- platform the row is tagged with
    op             VARCHAR NOT NULL,        -- op or collective
    pass           VARCHAR,                 -- 'fwd'/'bwd'; NULL for collectives
    world_size     INTEGER,                 -- collectives only
    implementation VARCHAR,                                 -- op implementation the data came from
    dtype          VARCHAR,                 -- data type of the op rows (kernel models); NULL for collectives
    cache_state    VARCHAR,                 -- which timings it was fitted on ('warm', 'cold', 'device')
    family         VARCHAR NOT NULL,        -- 'roofline', 'mlp', 'gbdt', 'embedding_mlp', 'sigmoid'
    params         JSON,                    -- hyperparameters / fitted parameters
    features       JSON,                    -- feature spec
    test_gmae      DOUBLE,                                  -- GMAE on the held-out test split
    test_mape      DOUBLE,                                  -- MAPE on the test split
    test_std       DOUBLE,                                  -- std of |e| on the test split
    test_error_hist JSON,                   -- test split histogram of e = (predicted - measured) / measured: {"edges", "labels", "counts"}
    n_train        INTEGER,                                 -- training rows
    n_test         INTEGER,                                 -- test rows
    n_dropped      INTEGER,                 -- rows left out before the split (NaN or non-positive time, missing statistics)
    data_hash      VARCHAR,                 -- sha256 of the training rows
    data_runs      VARCHAR[],               -- collection runs the training rows came from
    model_uri      VARCHAR,                 -- MLflow logged-model URI (models:/m-...) the version points at
    created_at     TIMESTAMP NOT NULL DEFAULT current_timestamp, -- when the row was created
    PRIMARY KEY (name, version)
);

-- Current aliases ('champion', 'latest') of registered models (mutable; mirrors MLflow, where 'latest' is implicit).
CREATE TABLE model_aliases (
    name    VARCHAR NOT NULL,                               -- registered model name
    alias   VARCHAR NOT NULL,                               -- alias name (champion, latest)
    version INTEGER NOT NULL,                               -- version the alias points at
    PRIMARY KEY (name, alias)
);

-- One simulator prediction of a trace set's per-iteration time.
CREATE TABLE predictions (
    prediction_id    BIGINT PRIMARY KEY DEFAULT nextval('seq_prediction_id'), -- prediction
    run_id           VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row
    trace_set_id     BIGINT NOT NULL REFERENCES trace_sets(trace_set_id), -- trace set
    workload_run_id  VARCHAR REFERENCES workload_runs(run_id), -- ground truth it is judged against, if any
    source_platform  VARCHAR NOT NULL REFERENCES platforms(name), -- where the trace was recorded
    target_platform  VARCHAR NOT NULL REFERENCES platforms(name), -- whose models and overheads were used
    mode             VARCHAR NOT NULL CHECK (mode IN ('model', 'replay')), -- model (fitted models) or replay (durations from the trace)
    model_set        VARCHAR,               -- canonical text of the model versions used (name:version,...)
    model_selection  VARCHAR,               -- what was asked: '<--models spec>/<cache state>/<digest of every version it selected>'
    overhead_version BIGINT REFERENCES overhead_versions(overhead_version), -- overhead table version
    predicted_us     DOUBLE NOT NULL,       -- steady-state iteration time: two back-to-back iterations minus one (max over ranks)
    isolated_us      DOUBLE,                -- Algorithm 1's T: one iteration from an idle machine (max over ranks)
    device_active_us DOUBLE,                -- max over ranks of busy time
    baseline_us      DOUBLE,                -- max over streams of summed kernel time
    comm_unoverlapped_frac DOUBLE,          -- share of the iteration where only communication runs
    measured_us      DOUBLE,                -- ground truth copied at prediction time (workload run or trace median)
    per_rank         JSON,                  -- [{"rank":r,"predicted_us":..,"streams":{..}}]
    unmodelled       JSON,                  -- [{"op":name,"count":n,"measured_share":x}]
    iterations       INTEGER,               -- iterations simulated; predicted_us is their median
    elapsed_s        DOUBLE,                -- wall time of the prediction
    created_at       TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- The model versions a prediction used (for joins to model_versions).
CREATE TABLE prediction_models (
    prediction_id BIGINT NOT NULL REFERENCES predictions(prediction_id), -- prediction
    name          VARCHAR NOT NULL,                         -- registered model name
    version       INTEGER NOT NULL,                         -- registered model version used
    ops_predicted INTEGER,                  -- how many kernels this version predicted
    PRIMARY KEY (prediction_id, name)
);

-- A sharding study (pmdb shard): the plans of one task, predicted from per-rank traces derived without running
-- the plans, and with --validate measured too. The studies of one `pmdb shard --study` share a series label.
CREATE TABLE shard_studies (
    study_id    BIGINT PRIMARY KEY DEFAULT nextval('seq_study_id'), -- study
    run_id      VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row (kind 'shard')
    task_id     BIGINT REFERENCES tasks(task_id),           -- the task studied (NULL for --tables FILE)
    platform    VARCHAR NOT NULL REFERENCES platforms(name), -- platform whose models and overheads predicted the plans
    world_size  INTEGER NOT NULL,                           -- number of ranks
    batch_size  INTEGER NOT NULL,                           -- batch size (global)
    config      JSON,                       -- the DLRM shape studied (MLP widths; tables with E, D, L, index source)
    seed        BIGINT,                     -- seed of the inputs and of the random sharder
    series      VARCHAR,                    -- label shared by the studies of one `pmdb shard --study` (NULL for single studies)
    trace_origin VARCHAR,                   -- 'derived-from:<trace_set_id>' (an existing trace) or 'captured:<trace_set_id>' (a single-iteration capture made for the study); ';'-joined when plans needed several
    source_trace_set_id BIGINT REFERENCES trace_sets(trace_set_id), -- the recorded trace set the plans were derived from (the first, when several)
    capture_s   DOUBLE,                     -- wall seconds of the capture (NULL when derived from an existing trace)
    predict_s   DOUBLE,                     -- wall seconds deriving and predicting every plan (capture excluded)
    chosen      VARCHAR,                    -- sharder predicted fastest
    fastest     VARCHAR,                    -- sharder measured fastest (--validate)
    chosen_slowdown DOUBLE,                 -- measured time of the chosen plan / that of the fastest - 1 (--validate)
    success     BOOLEAN,                    -- the paper's criterion: the chosen plan is the fastest or within 10% of it (--validate)
    validate_s  DOUBLE,                     -- wall seconds running every plan for ground truth (--validate)
    created_at  TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- The plans of a sharding study: one per sharder or plan file, with predicted and (with --validate) measured times.
CREATE TABLE shard_plans (
    study_id      BIGINT NOT NULL REFERENCES shard_studies(study_id), -- the sharding study
    sharder       VARCHAR NOT NULL,                         -- sharder name, or 'file:<stem>' for a plan file
    plan          JSON NOT NULL,            -- table index -> rank (a list, one rank per table)
    position      INTEGER,                  -- 1 = predicted fastest
    loads         JSON,                     -- per rank: {"rank", "tables", "indices" (lookups per batch), "total_dim" (sum of D), "comm_bytes" (all_to_all message sizes, forward and backward)}
    predicted_us  DOUBLE,                                   -- predicted per-iteration time of the plan
    prediction_id BIGINT REFERENCES predictions(prediction_id), -- prediction
    workload_run_id VARCHAR REFERENCES workload_runs(run_id), -- set with --validate: the last round's run
    measured_us   DOUBLE,                   -- with --validate: median over every round's iterations of the slowest rank's time
    measured_runs VARCHAR[],                -- with --validate: every ground-truth run of the plan (one per round)
    measured_spread DOUBLE,                 -- with --validate: (max - min) / median of the per-round times
    predict_s     DOUBLE,                   -- wall time of deriving and predicting this plan, seconds
    PRIMARY KEY (study_id, sharder)
);

-- Analytical planner studies (pmdb plan, pmdb plan sweep): one search of one model on one system and GPU count.
CREATE TABLE plan_studies (
    study_id     BIGINT PRIMARY KEY DEFAULT nextval('seq_plan_study_id'), -- study
    run_id       VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row (kind 'plan')
    model_name   VARCHAR NOT NULL,                          -- preset name or model file stem
    model        JSON NOT NULL,             -- transformer shape (planner.model.Transformer fields)
    system       JSON NOT NULL,             -- system description used (planner.system.System fields, with provenance)
    system_name  VARCHAR NOT NULL,                          -- system label (h100, a100@nvs64, platform:NAME, ...)
    platform     VARCHAR REFERENCES platforms(name), -- the platform whose measured peaks made the system; NULL for spec sheets
    nvlink_domain INTEGER NOT NULL,                         -- GPUs per NVLink domain used by the search
    gpus         INTEGER NOT NULL,                          -- number of GPUs
    global_batch INTEGER NOT NULL,                          -- global batch size (sequences)
    strategy     VARCHAR NOT NULL,                          -- 1d, summa, context or all
    framework    JSON NOT NULL,             -- framework settings (planner.candidates.Framework: dtype, SP, fused attention, overlaps)
    calibrated   BOOLEAN NOT NULL DEFAULT FALSE,            -- TRUE when fitted models replaced the ideal formulas
    model_usage  JSON,                      -- per op family ('gemm', 'all_reduce', ...): evaluations timed by each source ('roofline', 'ring', 'calibrated')
    evaluated    BIGINT,                    -- configurations evaluated
    feasible     BIGINT,                    -- configurations that fit in memory
    min_memory_bytes DOUBLE,                -- smallest per-GPU memory over all configurations (why nothing fits, when nothing does)
    elapsed_s    DOUBLE,                                    -- wall time of the search, seconds
    created_at   TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was created
);

-- The best configurations of a planner study, ranked.
CREATE TABLE plan_configs (
    study_id     BIGINT NOT NULL REFERENCES plan_studies(study_id), -- the planner study
    position     INTEGER NOT NULL,          -- 1 = fastest
    strategy     VARCHAR NOT NULL,          -- 1d, summa or context
    config       JSON NOT NULL,             -- parallel dimensions, micro-batches, panels, recomputation, distributed optimizer, NVLink placement
    time_s       DOUBLE NOT NULL,           -- per iteration, seconds
    throughput   DOUBLE,                    -- samples per second
    memory_bytes DOUBLE,                    -- per GPU (fullest pipeline stage)
    memory       JSON,                      -- bytes per GPU: weights, gradients, optimizer, activations
    breakdown    JSON,                      -- seconds per component (compute, memory, overhead, *_comm, bubble, optimizer); sums to time_s
    PRIMARY KEY (study_id, position)
);

-- pmdb plan validate: measured runs predicted with their given parallelism (no search).
CREATE TABLE plan_validations (
    run_id       VARCHAR NOT NULL REFERENCES collection_runs(run_id), -- collection run that wrote the row (kind 'plan-validate')
    row_index    INTEGER NOT NULL,          -- 0-based data row of the input file
    source_file  VARCHAR NOT NULL,          -- path of the input file as given
    system_name  VARCHAR NOT NULL,                          -- system description used
    framework    VARCHAR NOT NULL,                          -- framework preset used (e.g. megatron-deepspeed)
    config       JSON NOT NULL,             -- the run as read: GPUs, batch sizes, model shape, tp/dp/pp
    measured_s   DOUBLE NOT NULL,           -- measured iteration time, seconds
    predicted_s  DOUBLE NOT NULL,           -- predicted iteration time, seconds
    rel_error    DOUBLE NOT NULL,           -- (predicted - measured) / measured
    breakdown    JSON,                      -- predicted seconds per component
    PRIMARY KEY (run_id, row_index)
);
