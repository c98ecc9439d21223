"""Fixtures of the trace tests: real traces recorded once per test run (a CPU training loop in three passes, and a
2-rank gloo program) are ``cpu_passes`` and ``gloo_traces`` of tests/conftest.py, shared with the other folders
that use the same recordings."""
