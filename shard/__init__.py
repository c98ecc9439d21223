"""Sharding-config selection without running the workload (pmdb shard)."""
