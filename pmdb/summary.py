"""What a store holds, as `pmdb status` shows it: its platforms and its rows per table and platform, as plain rows
(:class:`pmdb.rows.Rows`, no pandas)."""
from __future__ import annotations

from pmdb.rows import Rows
from pmdb.store import Store

# table -> its platform column
TABLES_WITH_PLATFORM = {"op_measurements": "platform", "collective_measurements": "platform",
                        "platform_peaks": "platform", "workload_runs": "platform", "trace_sets": "platform",
                        "overhead_versions": "platform", "model_versions": "platform",
                        "predictions": "target_platform"}


def row_counts(store: Store) -> Rows:
    """table_name, platform, rows: one row per table and platform holding rows, by table then platform."""
    parts = [f"SELECT '{table}' AS table_name, {column} AS platform, count(*) AS rows FROM {table} GROUP BY {column}"
             for table, column in TABLES_WITH_PLATFORM.items()]
    return store.rows(" UNION ALL ".join(parts) + " ORDER BY table_name, platform")


def platforms(store: Store) -> Rows:
    """name, kind (cpu, cuda), device (GPU name, or CPU model), gpus, imported: every platform, by name."""
    return store.rows(
        "SELECT name, device_kind AS kind, CASE WHEN device_kind = 'cpu' THEN cpu_model "
        "ELSE coalesce(gpu_name, cpu_model) END AS device, gpu_count AS gpus, is_imported AS imported "
        "FROM platforms ORDER BY name")
