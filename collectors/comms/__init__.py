"""Communication collectives: size ladders, message-size definitions, the per-rank benchmark loop, launching ranks
(torch.multiprocessing or torchrun) and turning per-rank latencies into ``collective_measurements`` rows."""
