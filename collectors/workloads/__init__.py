"""Training workloads and their ground truth: DLRM (presets, sharders, random tasks) and transformers, run on N ranks,
timed without the profiler, then recorded by a Kineto-only and an execution-trace pass (see ``collect``)."""
