-- 0003: GPU spec sheets of platforms. A platform that is not this machine (a GPU known from a device-config JSON,
-- or the GPU an imported trace ran on) gets the numbers a roofline and the cross-GPU kernel models need. One row
-- per platform; registering a sheet again replaces the row. Peaks measured on the platform itself
-- (platform_peaks) take precedence over these nominal figures wherever both exist.

CREATE TABLE gpu_specs (
    platform        VARCHAR PRIMARY KEY REFERENCES platforms(name), -- platform the specs describe
    device          VARCHAR NOT NULL,      -- device name as the sheet or trace gives it ('Tesla V100-PCIE-32GB')
    fp32_flops      DOUBLE,                -- peak FP32 rate, FLOP/s (sheet: SingleFLOPs in GFLOP/s x 1e9)
    mem_bw          DOUBLE,                -- peak device-memory bandwidth, bytes/s (sheet: Mem_Bw in GB/s x 1e9)
    sm_count        INTEGER,               -- streaming multiprocessors
    cores_per_sm    INTEGER,               -- FP32 cores per SM
    clock_mhz       DOUBLE,                -- boost clock, MHz
    l2_bytes        BIGINT,                -- L2 cache, bytes (sheet: L2Cache in MB x 2^20)
    memory_bytes    BIGINT,                -- device memory, bytes (sheet: Dev_Mem in GB x 2^30)
    source          VARCHAR NOT NULL,      -- 'spec-sheet' or 'trace-device-properties'
    source_file     VARCHAR,               -- path of the sheet or trace as given
    source_sha256   VARCHAR,               -- sha256 of that file
    details         JSON,                  -- every field of the source as read (names as written)
    registered_at   TIMESTAMP NOT NULL DEFAULT current_timestamp -- when the row was (re)written
);
