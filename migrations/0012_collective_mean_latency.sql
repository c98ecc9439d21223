-- 0012: the mean latency of a collective over its timed iterations. gloo on a 2-core KVM host is bimodal per call
-- (~0.3 ms or ~3.3 ms for the same 4 KiB all_reduce, the slow mode in 11-48% of calls, in clusters), so the
-- median of a size's iterations lands on either mode and the fitted curve with it; a training step pays every
-- call's time, the mean. Collective models are fitted on the mean where a row has it (measured sweeps from now
-- on), else on lat_p50_us (rows written before, and imports: nccl-tests' figure is already its average).
ALTER TABLE collective_measurements ADD COLUMN lat_mean_us DOUBLE;  -- mean latency over iterations (µs)
