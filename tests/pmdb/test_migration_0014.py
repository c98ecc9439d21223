"""A store written by the release before migration 0014 (no self_priced_share) opens with the current code, keeps
every prediction, and has the share computed from each row's unmodelled list: a prediction whose work all kept its
traced time is self-priced and leaves the E2E error tables, whose GMAE of one error is that error (16.81%)."""
from __future__ import annotations

import json

import pytest

from harness import store_before
from pmdb import migrator
from pmdb.config import Workspace
from pmdb.store import Store
from simulator.error_stats import e2e_errors, self_priced_note

_TRACE = [{"op": "aten::mm", "count": 3, "fallback": "trace", "measured_share": 0.7, "predicted_share": 0.8},
          {"op": "aten::relu", "count": 1, "fallback": "roofline", "measured_share": 0.1, "predicted_share": 0.1}]
_MODELLED = [{"op": "aten::relu", "count": 1, "fallback": "trace", "measured_share": 0.1, "predicted_share": 0.05}]
_OLD_FORMAT = [{"op": "aten::mm", "count": 3, "measured_share": 0.7}]   # no fallback named: share not known


def _write_v13_store(ws: Workspace) -> None:
    """Migrations 0001-0013 applied; one completed predict run; four predictions with ground truth."""
    conn = store_before(ws, 13)
    conn.execute("INSERT INTO platforms (name, device_kind, semantics) VALUES ('gpu-old', 'cuda', 'async_device')")
    conn.execute("INSERT INTO collection_runs (run_id, kind, platform, pmdb_version, status) "
                 "VALUES ('r1', 'predict', 'gpu-old', '0.1.0', 'completed')")
    conn.execute("INSERT INTO trace_sets (trace_set_id, run_id, platform, world_size, source) "
                 "VALUES (7, 'r1', 'gpu-old', 1, 'imported'), (8, 'r1', 'gpu-old', 1, 'imported'), "
                 "(9, 'r1', 'gpu-old', 1, 'imported')")
    rows = [(1, 7, "model", _TRACE, 1002.0), (2, 8, "model", _MODELLED, 1168.1), (3, 9, "model", _OLD_FORMAT, 1100.0),
            (4, 7, "replay", None, 1001.0)]
    for pid, trace_set, mode, unmodelled, predicted in rows:
        conn.execute("INSERT INTO predictions (prediction_id, run_id, trace_set_id, source_platform, "
                     "target_platform, mode, model_set, predicted_us, measured_us, unmodelled) "
                     "VALUES (?, 'r1', ?, 'gpu-old', 'gpu-old', ?, ?, ?, 1000.0, ?)",
                     [pid, trace_set, mode, None if mode == "replay" else f"m:{pid}", predicted,
                      None if unmodelled is None else json.dumps(unmodelled)])
    conn.close()


def test_v13_store_keeps_predictions_and_learns_which_are_self_priced(tmp_path):
    ws = Workspace(tmp_path / "ws")
    _write_v13_store(ws)
    with Store.open(ws) as store:
        assert migrator.current_version(store.conn) == len(migrator.available())
        rows = store.query("SELECT prediction_id, predicted_us, self_priced_share FROM predictions ORDER BY 1")
        assert rows["predicted_us"].tolist() == [1002.0, 1168.1, 1100.0, 1001.0]        # every row kept
        shares = rows["self_priced_share"].tolist()
        assert shares[0] == pytest.approx(0.8) and shares[1] == pytest.approx(0.05)
        assert all(s != s for s in shares[2:])                                            # unknown / replay: NULL
        flags = store.query("SELECT prediction_id, self_priced FROM v_prediction_errors ORDER BY 1")
        assert flags["self_priced"].tolist() == [True, False, False, False]
        model = e2e_errors(store, by="platform,mode,model_set_id", mode="model")
        # the self-priced 0.2% prediction is left out; of the two left, one set each: n = 1 GMAE is |e| exactly
        assert sorted(model["n"].tolist()) == [1, 1]
        assert 16.81 in model["geomean_pct"].tolist() and 10.0 in model["geomean_pct"].tolist()
        view = store.query("SELECT n, geomean_abs_error FROM v_e2e_errors WHERE mode = 'model' ORDER BY 2")
        assert view["n"].tolist() == [1, 1]
        assert view["geomean_abs_error"].tolist() == pytest.approx([0.1, 0.1681], abs=1e-12)
        assert "1 model-mode prediction left out" in self_priced_note(store, mode="model")
        assert self_priced_note(store, mode="replay") is None
