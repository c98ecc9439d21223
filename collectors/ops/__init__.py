"""Kernel microbenchmarks (``pmdb collect ops``): one module per op family registers its ops in ``catalogue``;
``timer`` times a callable warm, cold or with CUDA events; ``sweep`` runs the resumable loop into the store;
``peaks`` measures the roofline peaks of the platform."""

# Intra-op threads of a microbenchmark (``collect ops --threads``) and of a workload rank: one core is the CPU "device"
# (here, not in ``sweep``, so that the parent of a workload run reads it without importing torch).
DEFAULT_THREADS = 1
