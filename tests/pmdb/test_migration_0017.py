"""A store written by the release before migration 0017 (NeuSight rows stored as single-call latencies) opens with
the current code, keeps every row, and holds the same device times, floors and latencies a fresh import writes:
the SQL of 0017 and collectors/importers/launch_floor.py apply one rule. Other rows are left as they were."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.importers import launch_floor
from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store

ADD_US = [26.0, 25.5, 27.0, 80.0, 400.0, 1500.0]        # one NeuSight 'add' table, single-call latencies (µs)
LN_US = [46.0, 47.5, 120.0, 900.0]


def _write_v13_store(ws: Workspace) -> None:
    """Migrations 0001-0013; a NeuSight import (add, layer_norm), a generic import and a microbenchmark row."""
    conn = store_before(ws, 13)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('v100', 'cuda', 'async_device')")
    for run in ("neu", "gen", "mb"):
        conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                     "VALUES (?, 'import-ops', 'v100', '0.1.0', 'completed')", [run])
    conn.execute("INSERT INTO imported_files (sha256, run_id, path, format, platform) VALUES "
                 "('a', 'neu', 'add.csv.gz', 'neusight', 'v100'), ('b', 'gen', 'mine.csv', 'generic', 'v100')")
    rows = [("neu", "add", t, "import") for t in ADD_US] + [("neu", "layer_norm", t, "import") for t in LN_US]
    rows += [("gen", "add", 12.5, "import"), ("mb", "add", 30.0, "microbenchmark")]
    for i, (run, op, time_us, source) in enumerate(rows):
        conn.execute("INSERT INTO op_measurements (run_id, platform, op, pass, implementation, dtype, device, "
                     "cache_state, params, config_key, median_us, source) VALUES (?, 'v100', ?, 'fwd', 'torch', "
                     "'float32', 'cuda:0', 'device', ?, ?, ?, ?)", [run, op, f'{{"M": {i + 1}, "N": 8}}', f"k{i}",
                                                                     time_us, source])
    conn.close()


def test_v13_neusight_rows_get_their_device_time_and_keep_their_latency(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _write_v13_store(ws)
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        rows = store.query("SELECT run_id, op, median_us, single_call_us, host_floor_us, host_lead_us "
                           "FROM op_measurements ORDER BY measurement_id")
    assert len(rows) == len(ADD_US) + len(LN_US) + 2                      # every row kept
    for op, latencies in (("add", ADD_US), ("layer_norm", LN_US)):
        mine = rows[(rows["run_id"] == "neu") & (rows["op"] == op)]
        host = launch_floor.table_floor(np.array(latencies))
        assert mine["single_call_us"].tolist() == pytest.approx(latencies)
        assert mine["median_us"].tolist() == pytest.approx(host.device_us(np.array(latencies)).tolist())
        assert mine["host_floor_us"].tolist() == pytest.approx([host.floor_us] * len(latencies))
        assert mine["host_lead_us"].tolist() == pytest.approx([host.lead_us] * len(latencies))
    others = rows[rows["run_id"] != "neu"]
    assert others["median_us"].tolist() == [12.5, 30.0]                  # device times already: untouched
    assert others[["host_floor_us", "host_lead_us"]].isna().all().all()
