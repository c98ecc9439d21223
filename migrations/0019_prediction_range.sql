-- 0019: how far a prediction for a GPU known only by its spec sheet could be off. `pmdb fit cross-gpu` stores with
-- each op's model the ratio of measured to predicted kernel time on every source GPU when it was held out
-- (leave-one-GPU-out); a prediction priced with such models is simulated again with its cross-GPU priced kernels
-- scaled by each held-out GPU's ratio (simulator/cross_gpu_range.py). range_low_us / range_high_us: the lowest and
-- highest of the prediction and those steps (µs); range_detail: {"per_gpu_us": {gpu: step µs}, "priced_share":
-- share of the op work those models priced}. NULL: no op was priced by a model with ratios, and rows before 0019.

ALTER TABLE predictions ADD COLUMN range_low_us DOUBLE; -- spec-only GPU: lowest of the prediction and the held-out GPUs' steps (µs, see 0019)
ALTER TABLE predictions ADD COLUMN range_high_us DOUBLE; -- spec-only GPU: highest of the prediction and the held-out GPUs' steps (µs, see 0019)
ALTER TABLE predictions ADD COLUMN range_detail JSON; -- {"per_gpu_us": {source gpu: step µs}, "priced_share": float} (see 0019)
