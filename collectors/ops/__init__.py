"""Kernel microbenchmarks (``pmdb collect ops``): one module per op family registers its ops in ``catalogue``;
``timer`` times a callable warm, cold or with CUDA events; ``sweep`` runs the resumable loop into the store;
``peaks`` measures the roofline peaks of the platform."""
