-- 0011: the values an op's cost can depend on. torch.sqrt runs ~4x slower on exact zeros than on other values on
-- the AMD host, and Adam's second moment of a token embedding is mostly exact zeros early in training (the rows of
-- tokens no batch has held yet): a workload run records, per rank, the share of exact zeros of every optimizer
-- state tensor at the start and at the end of its timed iterations. Stored traces hold shapes, not values;
-- pmdb/traces/state_values.py gives the ops that read such a state their zero share. Runs written before this
-- migration have no rows (their ops are priced as on random values, as before).

CREATE SEQUENCE seq_state_stat_id START 1;
-- one row per optimizer state tensor shaped like its parameter, per rank, per step it was read at
CREATE TABLE optimizer_state_stats (
    stat_id      BIGINT PRIMARY KEY DEFAULT nextval('seq_state_stat_id'), -- row id
    run_id       VARCHAR NOT NULL REFERENCES collection_runs(run_id),     -- workload run that wrote the row
    workload_id  BIGINT NOT NULL REFERENCES workloads(workload_id),       -- the workload trained
    rank         INTEGER NOT NULL,          -- rank holding the state
    step         INTEGER NOT NULL,          -- optimizer steps taken when read (warm-up steps, then timed ones)
    param_index  INTEGER NOT NULL,          -- position of the parameter in the optimizer's parameter groups
    state        VARCHAR NOT NULL,          -- state name, e.g. 'exp_avg_sq' (Adam's second moment)
    shape        INTEGER[] NOT NULL,        -- the state tensor's shape
    numel        BIGINT NOT NULL,           -- its elements
    zero_frac    DOUBLE NOT NULL            -- share of its elements that are exactly zero, [0, 1]
);
