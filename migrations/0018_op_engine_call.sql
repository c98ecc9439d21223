-- 0018: the autograd engine's per-call cost beside each CPU backward row. A backward microbenchmark times one
-- whole `torch.autograd.grad` (or `.backward()`) call: the engine's set-up of a graph task, ~21-27 µs on an idle
-- 2-core Intel Xeon (L3 480 MiB), is in every such row once, while a training step pays it once per backward, not
-- once per node (a bert step runs ~180 backward nodes in one call). The sweep measures that cost on the same
-- threads while it runs (collectors/ops/engine_call.py) and stores it with the row; v_op_measurements.node_us is
-- the row's time without it, what a node of a step pays. NULL: forward, GPU and loop-less rows, and rows before 0018.

ALTER TABLE op_measurements ADD COLUMN engine_call_us DOUBLE; -- CPU backward rows: the engine's per-call cost (µs) measured beside the row (see 0018)
