"""Tables that fit the terminal: `pmdb models`, `runs`, `errors`, `status` and `sql` at COLUMNS=80 on a real store
(in-process CLI), one empty-cell marker, row caps with a note, csv and json untouched."""
import io
import json
import re

import pandas as pd
import pytest

from pmdb import platform as platforms
from pmdb.cli.common import table_lines
from pmdb.cli.main import main
from pmdb.cli.text_table import EMPTY, cut_segments, layout
from pmdb.config import Workspace
from pmdb.store import Store

PLATFORM = "tbl-box"
OPS_ROWS = 60
EMPTY_WORDS = re.compile(r"\b(None|NaN|nan|NaT)\b|<NA>")


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A store with op rows, a fit (kernel and embedding versions with aliases), two DLRM workload runs predicted
    under two model selections, quickstart marker runs and a failed run."""
    ws = Workspace(tmp_path_factory.mktemp("tables") / "ws")
    with Store.open(ws, create=True) as store:
        platforms.ensure_named(store, PLATFORM, device_kind="cpu")
        with store.run("ops", PLATFORM, {"sweep": "quick", "ops": ["bmm"]}) as run:
            store.insert("op_measurements", [
                {"run_id": run.run_id, "platform": PLATFORM, "op": "bmm", "pass": "fwd", "implementation": "torch",
                 "dtype": "float32", "device": "cpu", "cache_state": "cold", "params": {"B": 2, "M": 8 + i, "N": 8,
                 "K": 8}, "config_key": f"k{i}", "median_us": 10.0 + i} for i in range(OPS_ROWS)])
        with store.run("fit", PLATFORM, {"family": "all"}) as fit:
            versions = []
            for name, op, pass_, impl in ((f"pmdb.{PLATFORM}.bmm.fwd.cold", "bmm", "fwd", "torch"),
                                          (f"pmdb.{PLATFORM}.embedding_lookup.bwd.torch_embedding_bag.cold",
                                           "embedding_lookup", "bwd", "torch_embedding_bag")):
                for version, family in ((1, "roofline"), (2, "embedding_linear" if "embedding" in op else "mlp")):
                    versions.append({"name": name, "version": version, "mlflow_run_id": f"m{version}",
                                     "run_id": fit.run_id, "platform": PLATFORM, "op": op, "pass": pass_,
                                     "implementation": impl, "cache_state": "cold", "family": family,
                                     "test_gmae": 0.05 * version, "test_mape": 0.06, "test_std": None,
                                     "n_train": 20, "n_test": 5})
            store.insert("model_versions", versions)
            store.insert("model_aliases", [
                {"name": versions[0]["name"], "alias": "champion", "version": 1},
                {"name": versions[0]["name"], "alias": "latest", "version": 2},
                {"name": versions[2]["name"], "alias": "champion", "version": 2},
                {"name": versions[2]["name"], "alias": "latest", "version": 2}])
        workloads = store.insert("workloads", [
            {"family": "dlrm", "name": "dlrm_test", "config": {}, "config_hash": f"h{s}", "batch_size": 256,
             "world_size": 2, "sharder": s} for s in ("naive", "size_lookup_greedy")], returning="workload_id")
        trace_sets = []
        for workload_id in workloads:
            with store.run("workload", PLATFORM, {"family": "dlrm", "preset": "dlrm_test", "world_size": 2}) as run:
                store.insert_one("workload_runs", {"run_id": run.run_id, "workload_id": workload_id,
                                                   "platform": PLATFORM, "iterations": 5, "warmup": 1,
                                                   "measured_us": 5000.0})
                trace_sets.append((run.run_id, store.insert_one("trace_sets", {
                    "run_id": run.run_id, "platform": PLATFORM, "workload_id": workload_id, "world_size": 2,
                    "source": "captured"}, returning="trace_set_id")))
            store.conn.execute("UPDATE collection_runs SET finished_at = started_at + INTERVAL 65 SECOND "
                               "WHERE run_id = ?", [run.run_id])
        with store.run("predict", PLATFORM, {"all": True, "mode": "model"}) as run:
            for (workload_run, trace_set), shares in zip(trace_sets, (True, False)):
                store.insert_one("predictions", {
                    "run_id": run.run_id, "trace_set_id": trace_set, "workload_run_id": workload_run,
                    "source_platform": PLATFORM, "target_platform": PLATFORM, "mode": "model",
                    "model_set": f"pmdb.{PLATFORM}.bmm.fwd.cold:1", "selection_spec": "champion",
                    "selection_cache_state": "default", "selection_digest": "abcd1234", "comm_shares_core": shares,
                    "predicted_us": 4000.0, "measured_us": 5000.0, "baseline_us": 3000.0})
        for step in ("ops", "fit", "predict"):
            with store.run("quickstart", None, {"step": step}):
                pass
        with pytest.raises(RuntimeError), store.run("comms", PLATFORM, {"backend": "gloo", "world_size": 2}):
            raise RuntimeError("gloo timed out after 300 s")
    return ws.home


def run(home, *args, columns=80, monkeypatch=None, capsys=None):
    monkeypatch.setenv("COLUMNS", str(columns))
    code = main(["--home", str(home), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args", [
    ["models"], ["models", "--all"], ["runs"], ["runs", "--all"], ["errors"], ["errors", "--what", "all"],
    ["errors", "--what", "e2e", "--by", "platform,family,workload,world_size,sharder,mode,model_set_id,model_set"],
    ["status"], ["sql", "--list"], ["sql", "SELECT * FROM op_measurements"], ["sql", "SELECT * FROM predictions"],
    ["sql", "SELECT * FROM collection_runs"], ["platform", "--list"],
], ids=" ".join)
def test_every_table_fits_80_columns_with_one_empty_marker(home, args, monkeypatch, capsys):
    code, out, err = run(home, *args, monkeypatch=monkeypatch, capsys=capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) >= 2
    assert max(map(len, lines)) <= 80, max(lines, key=len)
    assert not EMPTY_WORDS.search(out), EMPTY_WORDS.search(out)


def test_empty_cells_read_one_marker_and_csv_keeps_them_empty(home, monkeypatch, capsys):
    sql = ("SELECT 1 AS a, NULL::VARCHAR AS b, 'nan'::DOUBLE AS c, NULL::INTEGER AS d, NULL::TIMESTAMP AS e, "
           "TIMESTAMP '2026-01-02 03:04:05.678901' AS f")
    _, out, _ = run(home, "sql", sql, monkeypatch=monkeypatch, capsys=capsys)
    assert out.splitlines()[1].split() == ["1", EMPTY, EMPTY, EMPTY, EMPTY, "2026-01-02", "03:04:05"]
    _, csv, _ = run(home, "sql", sql, "--format", "csv", monkeypatch=monkeypatch, capsys=capsys)
    assert csv.splitlines()[1].startswith("1,,,,,2026-01-02 03:04:05.678901")


def test_a_single_wide_row_is_shown_one_column_per_line(home, monkeypatch, capsys):
    _, out, _ = run(home, "sql", "SELECT * FROM predictions ORDER BY prediction_id LIMIT 1", monkeypatch=monkeypatch,
                    capsys=capsys)
    lines = out.splitlines()
    assert len(lines) > 20 and max(map(len, lines)) <= 80 and "more columns" not in out
    assert lines[0].split() == ["prediction_id", "1"]
    assert [line.split() for line in lines if line.startswith(("measured_us ", "comm_shares_core "))] == [
        ["measured_us", "5000"], ["comm_shares_core", "True"]]


def test_sql_caps_table_rows_with_a_note_and_csv_gets_every_row(home, monkeypatch, capsys):
    _, out, _ = run(home, "sql", "SELECT * FROM op_measurements", monkeypatch=monkeypatch, capsys=capsys)
    lines = out.splitlines()
    assert f"(showing 50 of {OPS_ROWS} rows; --limit N or --format csv for all)" in lines
    assert re.match(r"\(\d+ more columns: .*; use --format csv/json\)$", lines[-1]), lines[-1]
    assert len(lines) == 1 + 50 + 2
    _, out, _ = run(home, "sql", "SELECT * FROM op_measurements", "--limit", "0", monkeypatch=monkeypatch,
                    capsys=capsys)
    assert len(out.splitlines()) == 1 + OPS_ROWS + 1 and "showing" not in out
    _, out, _ = run(home, "sql", "SELECT measurement_id FROM op_measurements", "--limit", "3",
                    monkeypatch=monkeypatch, capsys=capsys)
    assert [line.strip() for line in out.splitlines()[1:]] == [
        "1", "2", "3", f"(showing 3 of {OPS_ROWS} rows; --limit N or --format csv for all)"]
    _, csv, _ = run(home, "sql", "SELECT * FROM op_measurements", "--format", "csv", monkeypatch=monkeypatch,
                    capsys=capsys)
    frame = pd.read_csv(io.StringIO(csv))
    assert frame.shape[0] == OPS_ROWS and "median_us" in frame.columns and "trace_op_id" in frame.columns
    code, _, err = run(home, "sql", "SELECT 1", "--limit", "-1", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and err.strip() == "pmdb: error: bad --limit -1: give a number of rows, or 0 for all"


def test_models_shows_each_names_champion_with_short_names(home, monkeypatch, capsys):
    _, out, _ = run(home, "models", columns=100, monkeypatch=monkeypatch, capsys=capsys)
    lines = out.splitlines()
    assert lines[0] == f"platform: {PLATFORM}"
    assert lines[1].split() == ["name", "ver", "gmae%", "n_test", "aliases"]
    rows = [line.split() for line in lines[2:]]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("bmm.fwd.cold", "1", "champion"),
        ("embedding_lookup.bwd.torch_embedding_bag.cold", "2", "champion,latest")]
    _, out, _ = run(home, "models", "--all", monkeypatch=monkeypatch, capsys=capsys)
    assert len(out.splitlines()) == 2 + 4 and "family" in out.splitlines()[1]
    _, narrow, _ = run(home, "models", "--all", columns=60, monkeypatch=monkeypatch, capsys=capsys)
    assert max(map(len, narrow.splitlines())) <= 60 and ".bwd." in narrow and ".cold" in narrow  # cut in parts
    _, js, _ = run(home, "models", "--format", "json", monkeypatch=monkeypatch, capsys=capsys)
    listed = json.loads(js)
    assert [(r["name"], r["version"]) for r in listed] == [
        (f"pmdb.{PLATFORM}.bmm.fwd.cold", 1), (f"pmdb.{PLATFORM}.embedding_lookup.bwd.torch_embedding_bag.cold", 2)]
    assert {"family", "op", "mape_pct", "n_train", "created_at"} <= set(listed[0])
    _, js, _ = run(home, "models", "--all", "--format", "json", monkeypatch=monkeypatch, capsys=capsys)
    assert len(json.loads(js)) == 4
    _, out, _ = run(home, "models", "--all", "--limit", "1", monkeypatch=monkeypatch, capsys=capsys)
    assert out.splitlines()[-1] == "(showing 1 of 4 rows; --limit N or --format csv for all)"


def test_models_with_an_unknown_platform_is_a_one_line_error(home, monkeypatch, capsys):
    code, out, err = run(home, "models", "--platform", "nosuch", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith("pmdb: error: unknown platform 'nosuch' (known: tbl-box")
    code, _, err2 = run(home, "errors", "--platform", "nosuch", monkeypatch=monkeypatch, capsys=capsys)
    assert code == 2 and err2 == err  # the same message as `errors`


def test_runs_say_what_they_measured_and_how_long_they_took(home, monkeypatch, capsys):
    _, out, _ = run(home, "runs", columns=120, monkeypatch=monkeypatch, capsys=capsys)
    lines = out.splitlines()
    assert lines[0] == f"platform: {PLATFORM}"
    assert lines[1].split() == ["run_id", "kind", "what", "status", "took"]
    assert not any("quickstart" in line for line in lines[2:-2])
    assert lines[-1] == "(3 quickstart step markers not shown; --all shows them)"
    workload = [line for line in lines if " workload " in line]
    assert len(workload) == 2 and "dlrm_test ws2 size_lookup_greedy" in workload[0]
    assert workload[0].split()[-1] == "1m05s" and "dlrm_test ws2 naive" in workload[1]
    assert "sweep quick bmm" in out and "gloo ws2" in out
    failed = [line for line in lines if "gloo timed out" in line]
    assert len(failed) == 1 and re.match(r"[0-9a-f]{32}: .*gloo timed out after 300 s", failed[0])
    _, out, _ = run(home, "runs", "--all", "--limit", "2", monkeypatch=monkeypatch, capsys=capsys)
    assert "step predict" in out and out.splitlines()[-1] == "(showing 2 of 9 runs; --limit N for more)"
    _, js, _ = run(home, "runs", "--kind", "workload", "--format", "json", monkeypatch=monkeypatch, capsys=capsys)
    listed = json.loads(js)
    assert [r["duration_s"] for r in listed] == [65.0, 65.0] and listed[0]["started_at"] and listed[0]["what"]


def test_errors_tables_name_long_model_selections_below(home, monkeypatch, capsys):
    _, out, _ = run(home, "errors", "--what", "e2e", monkeypatch=monkeypatch, capsys=capsys)
    lines = out.strip().splitlines()
    assert lines[1:3] == [f"platform: {PLATFORM}", "mode: model"]
    assert lines[3].split() == ["family", "ws", "n", "gmae%", "min%", "max%", "signed%", "base%", "models"]
    assert [line.split()[-1] for line in lines[4:6]] == ["[1]", "[2]"]
    assert lines[6:] == ["[1] champion/default/abcd1234", "[2] champion/default/abcd1234/comm-shares-core"]
    _, csv, _ = run(home, "errors", "--what", "e2e", "--format", "csv", monkeypatch=monkeypatch, capsys=capsys)
    assert csv.splitlines()[0].startswith("platform,family,world_size,mode,model_set_id,n,geomean_pct")


def test_status_fits_and_lists_latest_runs_without_markers(home, monkeypatch, capsys):
    _, out, _ = run(home, "status", monkeypatch=monkeypatch, capsys=capsys)
    latest = out[out.index("latest runs"):]
    assert "quickstart" not in latest and "failed" in latest and "dlrm_test" in latest


def test_layout_cuts_text_keeps_ids_and_drops_what_cannot_fit():
    frame = pd.DataFrame({"id": ["a" * 32] * 2, "text": ["word " * 20] * 2, "n": [1.5, None], "x": ["y" * 30] * 2,
                          "z": ["q" * 30] * 2})
    lines, dropped = layout(frame, 60, keep=["id"])
    assert max(map(len, lines)) <= 60 and "a" * 32 in lines[1] and "…" in lines[1]
    assert lines[2].split()[-1] == EMPTY and dropped == ["x", "z"]
    listed = table_lines(frame, width=60, keep=["id"])
    assert listed[-1] == "(2 more columns: x, z; use --format csv/json)"
    assert cut_segments("embedding_lookup.fwd.torch_embedding_bag.cold", 30).split(".")[1::2] == ["fwd", "cold"]
    assert len(cut_segments("embedding_lookup.fwd.torch_embedding_bag.cold", 30)) <= 30
