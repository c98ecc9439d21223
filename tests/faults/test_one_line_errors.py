"""One line, never a traceback (issue #38, item 7), through the real CLI: mistyped commands and options, a model
config with a zero size (refused before this machine's platform is registered), counts no column can hold, an
execution trace naming parents it lacks (read with one warning), a zero-byte store (the fix says how to move it
aside) and a full disk during `pmdb export` (the store was not written, and the line says so)."""
from __future__ import annotations

import gzip
import json
import resource
from pathlib import Path

import pytest

from .conftest import Child, query, run_pmdb
from .test_bad_inputs import cli

SHARED_ET = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "traces" / "gpu" / "hta_simple_add"


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("one_line") / "ws"
    code, _, err = cli(home, "init")
    assert code == 0, err
    return home


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[transformers]")]
    assert len(lines) == 1 and lines[0].startswith("pmdb: error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("args, expected", [
    (["statsu"], "no such command 'statsu' (did you mean 'status'?); see `pmdb --help`"),
    (["runs", "--limt", "3"], "no such option: --limt (did you mean --limit?); see `pmdb runs --help`"),
    (["collect", "opz"], "no such command 'opz' (did you mean 'ops'?); see `pmdb collect --help`"),
])
def test_a_mistyped_command_or_option_is_one_line_with_the_suggestion(ws, args, expected):
    code, out, err = cli(ws, *args)
    assert code == 2 and not out
    assert _one_error_line(err) == f"pmdb: error: {expected}"


def test_a_zero_size_model_config_is_refused_before_anything_is_registered(ws, tmp_path):
    config = tmp_path / "zero.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 2, "n_embd": 0, "n_head": 4, "vocab_size": 128,
                                  "n_positions": 32, "bos_token_id": 0, "eos_token_id": 0}))
    code, _, err = cli(ws, "collect", "workload", "transformer", "--graph-only", "--config", config,
                       "--batch-size", "1", "--seq-len", "8")
    assert code == 2
    assert _one_error_line(err) == f"pmdb: error: {config}: hidden_size is 0; model sizes must be >= 1"
    assert query(ws, "SELECT count(*) FROM platforms") == [(0,)]


def test_a_count_no_column_can_hold_is_refused(ws, tmp_path):
    config = tmp_path / "tiny.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_embd": 32, "n_head": 2, "vocab_size": 128,
                                  "n_positions": 32, "bos_token_id": 0, "eos_token_id": 0}))
    code, _, err = cli(ws, "collect", "workload", "transformer", "--graph-only", "--config", config,
                       "--batch-size", "1000000000000", "--seq-len", "8")
    assert code == 2
    assert "--batch-size 1000000000000 is too large (at most 2,147,483,647)" in _one_error_line(err)
    assert query(ws, "SELECT count(*) FROM collection_runs") == [(0,)]


def test_an_et_naming_missing_parents_is_read_with_one_warning(ws, tmp_path):
    if not SHARED_ET.is_dir():
        pytest.skip(f"{SHARED_ET} not present")
    doc = json.loads(gzip.open(SHARED_ET / "et.json.gz").read())
    doc["nodes"][3]["parent"] = 99999
    et = tmp_path / "et.json"
    et.write_text(json.dumps(doc))
    code, _, err = cli(ws, "collect", "trace", "--kineto", SHARED_ET / "kineto.json.gz", "--et", et,
                       "--platform", "gpu-import")
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "pmdb: warning:" in line]
    assert len(warnings) == 1 and "1 node(s) name a parent that is not in the trace" in warnings[0], err
    assert query(ws, "SELECT count(*) FROM v_trace_sets") == [(1,)]


def test_a_zero_byte_store_says_how_to_move_it_aside(tmp_path):
    home = tmp_path / "ws"
    assert cli(home, "init")[0] == 0
    (home / "pmdb.duckdb").write_bytes(b"")
    move = f"`mv {home / 'pmdb.duckdb'} {home / 'pmdb.duckdb'}.damaged` then `pmdb init`"
    code, out, err = cli(home, "init")
    assert code == 2 and _one_error_line(err).endswith(move)
    code, out, err = cli(home, "doctor")
    assert code == 1
    fix = [line.strip() for line in out.splitlines() if line.strip().startswith("fix:")]
    assert fix == [f"fix: {move.replace('`', '')}"] or fix == [f"fix: {move}"], out
    assert "not a valid DuckDB" not in out.split("fix:")[1]      # the fix is a step, not the error again


@pytest.mark.slow
def test_a_full_disk_during_export_says_the_export_failed_not_the_store(tmp_path):
    home = tmp_path / "ws"
    assert run_pmdb(home, "init").returncode == 0
    if not SHARED_ET.is_dir():
        pytest.skip(f"{SHARED_ET} not present")
    imported = run_pmdb(home, "collect", "trace", "--kineto", str(SHARED_ET / "kineto.json.gz"), "--platform", "gpu")
    assert imported.returncode == 0, imported.stderr
    size = (home / "pmdb.duckdb").stat().st_size

    def _limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))

    target = tmp_path / "export"
    code, _, err = Child(["--home", str(home), "export", str(target)], preexec_fn=_limit).finish()
    line = _one_error_line(err)
    assert code == 1 and line.startswith(f"pmdb: error: writing the export to {target} failed"), line
    assert "the store was not changed" in line and "writing to the store failed" not in line
    assert not target.exists() and not list(tmp_path.glob(".export.tmp-*"))
    assert (home / "pmdb.duckdb").stat().st_size == size
