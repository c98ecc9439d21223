-- 0015: what a CUDA op measurement's time is. `pmdb collect ops` on CUDA timed one call between two CUDA events,
-- which for a small op is the host's launch path, not the kernel (an H200: a 1M-element add 23.8 µs that way, 11.8
-- µs launched 50 times back to back, a few µs of kernel). From now on a CUDA row's median_us (and mean, std, min)
-- is the device time of the kernels one call launches, from the profiler, and the single-call and back-to-back
-- times are kept beside it. Rows written before keep their times and are marked 'single_call'; the GPU fit leaves
-- them out and `collect ops` measures their configs again.

ALTER TABLE op_measurements ADD COLUMN device_timing VARCHAR;   -- CUDA rows: what median_us..min_us time: 'kernels' (device time of the kernels and copies one call launches, profiler), 'single_call' (one call between two CUDA events, host launch path included: rows before 0015); NULL on CPU, and for imports and trace rows
ALTER TABLE op_measurements ADD COLUMN single_call_us DOUBLE;   -- CUDA: median µs of one call between two CUDA events, synchronised after each (host launch floor included)
ALTER TABLE op_measurements ADD COLUMN back_to_back_us DOUBLE;  -- CUDA: µs per call of N calls in a row between two CUDA events (best of the rounds); a small op stays bound by host dispatch

UPDATE op_measurements SET device_timing = 'single_call', single_call_us = median_us
WHERE cache_state = 'device' AND source = 'microbenchmark';
