-- 0006: a model-mode prediction's training phases. Each phase's ops are simulated alone from an idle device (the
-- way a measurement that times the forward and loss.backward() separately runs them); NULL where the graph has no op
-- of that phase, and for every prediction written before this migration.

ALTER TABLE predictions ADD COLUMN predicted_fw_us DOUBLE;        -- forward ops alone, µs
ALTER TABLE predictions ADD COLUMN predicted_loss_us DOUBLE;      -- loss ops between forward and backward alone, µs
ALTER TABLE predictions ADD COLUMN predicted_bw_us DOUBLE;        -- backward ops alone, µs
ALTER TABLE predictions ADD COLUMN predicted_optimizer_us DOUBLE; -- optimizer ops alone, µs
