-- 0020: a CPU op's own time by the size of its inputs. On a CPU an op without a model is priced by its samples: an
-- op without children by its whole time (T5), one with children by T2 + its children + T5 gaps + T3. An op's own
-- time can be work that grows with its inputs (`aten::all` reduces after its last child: T3 382 µs over
-- [8, 4, 64, 64], 2-8 µs over [8, 64]), so one mean per op name priced a small call as a big one. Each CPU sample of
-- kind T2, T3 or T5 now carries its op's size class, floor(log4(elements of its tensor inputs)) (0 for fewer than 4),
-- and overhead_sizes holds the IQR-filtered statistics per (op name, kind, size class) beside the per-name ones in
-- overheads. NULL size_class: GPU samples, T1, ops without tensor inputs, and samples before 0020; versions before
-- 0020 have no overhead_sizes rows and price by name as before.

ALTER TABLE overhead_samples ADD COLUMN size_class INTEGER; -- CPU T2/T3/T5: floor(log4(elements of the op's tensor inputs)); NULL otherwise (see 0020)

-- IQR-filtered overhead statistics per op name, kind and input size class (CPU T2/T3/T5 samples, see 0020).
CREATE TABLE overhead_sizes (
    overhead_version BIGINT NOT NULL REFERENCES overhead_versions(overhead_version), -- overhead table version
    op_name    VARCHAR NOT NULL,                            -- op name
    kind       VARCHAR NOT NULL CHECK (kind IN ('T2', 'T3', 'T5')), -- T2, T3 or T5 (method.md section 6)
    size_class INTEGER NOT NULL,                            -- floor(log4(elements of the op's tensor inputs))
    mean_us    DOUBLE NOT NULL,                             -- mean after IQR filtering
    std_us     DOUBLE,                                      -- std after IQR filtering
    count      INTEGER NOT NULL,                            -- samples kept after IQR filtering
    PRIMARY KEY (overhead_version, op_name, kind, size_class)
);
