"""A store written before migration 0021 opens with the current code and keeps its registered versions: they get
no validation score (NULL), and their champion is still chosen by test GMAE."""
from __future__ import annotations

from fitters.registry import choose_champion
from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store

NAME = "relu.fwd.cold~cpu-x"


def test_v20_versions_keep_their_rows_and_their_test_ranking(tmp_path):
    ws = Workspace(tmp_path / "ws")
    conn = store_before(ws, 20)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('cpu-x', 'cpu', 'sync_host')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                 "VALUES ('f', 'fit', 'cpu-x', '0.1.0', 'completed')")
    for version, family, gmae in ((1, "roofline", 0.07), (2, "mlp", 0.02), (3, "gbdt", 0.04)):
        conn.execute("INSERT INTO model_versions (name, version, mlflow_run_id, run_id, platform, op, pass, family, "
                     "test_gmae, data_hash) VALUES (?, ?, ?, 'f', 'cpu-x', 'relu', 'fwd', ?, ?, 'h')",
                     [NAME, version, f"m{version}", family, gmae])
    conn.close()
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        rows = store.query("SELECT version, family, test_gmae, validation_gmae, validation_configs FROM model_versions ORDER BY version")
        assert rows["family"].tolist() == ["roofline", "mlp", "gbdt"]
        assert rows["test_gmae"].tolist() == [0.07, 0.02, 0.04] and rows[["validation_gmae", "validation_configs"]].isna().all().all()
        assert choose_champion(store, NAME) == 2
