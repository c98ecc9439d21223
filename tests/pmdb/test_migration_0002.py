"""A store written by the release before migration 0002 (schema 0001 only, the model selection as one text) opens
with the current code, keeps every row and has its selections converted into columns."""
from __future__ import annotations

from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store

_SELECTIONS = {1: "champion/default/1a2b3c4d/comm-shares-core", 2: "pmdb.x.relu.fwd:3,pmdb.x.mm.fwd:1/cold/ffff0000",
               3: None}


def _write_v1_store(ws: Workspace) -> None:
    """The file as the previous release left it: migration 0001 applied, one completed predict run, three
    predictions (two model-mode selections, one replay)."""
    conn = store_before(ws, 1)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('cpu-old', 'cpu', 'sync_host')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                 "VALUES ('r1', 'predict', 'cpu-old', '0.1.0', 'completed')")
    conn.execute("INSERT INTO trace_sets (trace_set_id, run_id, platform, world_size, source) "
                 "VALUES (7, 'r1', 'cpu-old', 2, 'imported')")
    for pid, selection in _SELECTIONS.items():
        mode = "replay" if selection is None else "model"
        conn.execute("INSERT INTO predictions (prediction_id, run_id, trace_set_id, source_platform, "
                     "target_platform, mode, model_set, model_selection, predicted_us, measured_us) "
                     "VALUES (?, 'r1', 7, 'cpu-old', 'cpu-old', ?, ?, ?, ?, 1000.0)",
                     [pid, mode, None if selection is None else "a:1", selection, 900.0 + pid])
    conn.close()


def test_v1_store_opens_keeps_rows_and_converts_selections(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _write_v1_store(ws)
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        rows = store.query("SELECT prediction_id, predicted_us, model_selection, selection_spec, "
                           "selection_cache_state, selection_digest, comm_shares_core FROM predictions "
                           "ORDER BY prediction_id")
        assert rows["predicted_us"].tolist() == [901.0, 902.0, 903.0]           # every row kept
        assert rows["model_selection"].tolist()[:2] == [_SELECTIONS[1], _SELECTIONS[2]]  # the old text kept
        first, second, replay = rows.to_dict("records")
        assert (first["selection_spec"], first["selection_cache_state"], first["selection_digest"],
                first["comm_shares_core"]) == ("champion", "default", "1a2b3c4d", True)
        assert (second["selection_spec"], second["selection_cache_state"], second["selection_digest"],
                second["comm_shares_core"]) == ("pmdb.x.relu.fwd:3,pmdb.x.mm.fwd:1", "cold", "ffff0000", False)
        assert replay["selection_spec"] is None or replay["selection_spec"] != replay["selection_spec"]
        # the error views group by the same selection text as before
        ids = store.query("SELECT prediction_id, model_set_id FROM v_prediction_errors ORDER BY 1")
        assert ids["model_set_id"].tolist() == [_SELECTIONS[1], _SELECTIONS[2], "replay"]
