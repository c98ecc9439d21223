-- 0016: what a cold repetition flushed. A fixed 64 MiB stream evicted the caches of a 32 MiB-LLC host but left
-- most of a 480 MiB one warm, so 'cold' meant different things on different hosts. Cold rows now say how the
-- op's operands were pushed out of every cache level before each repetition: '<method>:<bytes>' where the CPU's
-- cache-line flush evicted exactly the op's operands (method 'clflushopt', 'clflush' or 'dc-civac'; bytes: the
-- operand storages evicted), 'stream:<bytes>' where a buffer of that size was streamed through the caches. Rows
-- written before keep NULL (a 64 MiB stream). The host's cache sizes are stored with each collect-ops run (its
-- summary's timing environment, 'caches').

ALTER TABLE op_measurements ADD COLUMN flushed VARCHAR; -- cold rows: '<method>:<operand bytes>' or 'stream:<bytes>' (see 0016); NULL otherwise and before 0016
