"""`pmdb status` (and the tables of `runs` and `sql`) print from plain DuckDB rows: a fresh interpreter running them
on a store with rows loads neither pandas, numpy, pyarrow, torch nor MLflow, and prints what the pandas-based tables
printed (the text pinned below, as `pmdb status` printed it before; and the same text as in a process where pandas
is loaded)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from harness import in_process
from tests.pmdb.test_cli_tables import home  # noqa: F401  (fixture: runs, fits, predictions, a failed run)

NOT_LOADED = ("pandas", "numpy", "pyarrow", "torch", "mlflow", "transformers")
SQL = "SELECT run_id, kind, args, status, started_at, pid FROM collection_runs ORDER BY started_at"

_PROBE = """
import contextlib, io, json, sys
from pmdb.cli.main import main
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(args)
    print(json.dumps({"code": code, "out": out.getvalue(), "loaded": [m for m in %r if m in sys.modules]}))
""" % (NOT_LOADED,)

# `pmdb status` of the `home` fixture as the pandas-based code printed it (COLUMNS=400: the warning on one line),
# run ids and durations under a second masked
STATUS = """\
workspace HOME  schema vN
warning: the MLflow registry at HOME/mlflow.db (missing) holds 0 of the 4 versions the store lists (fitted with --tracking-uri?); run `pmdb --home HOME doctor` (`--repair` re-registers them)

platforms:
name     kind  device  gpus  imported
tbl-box  cpu   -       -     True

rows per table and platform:
platform: tbl-box
table_name       rows
model_versions      4
op_measurements    60
predictions         2
trace_sets          2
workload_runs       2

latest runs:
platform: tbl-box
run_id        kind      what                              status     took
RUN           comms     gloo ws2                          failed     Nms
RUN           predict   all, model                        completed  Nms
RUN           workload  dlrm_test ws2 size_lookup_greedy  completed  1m05s
RUN           workload  dlrm_test ws2 naive               completed  1m05s
RUN           fit       all                               completed  Nms
RUN           ops       sweep quick bmm                   completed  Nms
"""

EMPTY_STATUS = """\
workspace HOME  schema vN

platforms:
(no rows)

rows per table and platform:
(no rows)

latest runs:
(no rows)
"""


def _probe(*commands: list[str], columns: int) -> list[dict]:
    """Per command, run in order in one fresh interpreter: exit code, output, the packages loaded so far."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "COLUMNS": str(columns)}
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def _masked(text: str, home: Path) -> str:
    text = text.replace(str(home), "HOME")
    text = re.sub(r"schema v\d+", "schema vN", text)
    text = re.sub(r"^[0-9a-f]{12}(?= )", "RUN         ", text, flags=re.M)
    return re.sub(r"\b\d{1,3}ms$", "Nms", text, flags=re.M)


def test_status_runs_and_sql_tables_load_no_pandas_and_print_as_before(home, monkeypatch):  # noqa: F811
    base = ["--home", str(home)]
    status, runs, sql = _probe([*base, "status"], [*base, "runs", "--all"], [*base, "sql", SQL], columns=400)
    for result in (status, runs, sql):
        assert result["code"] == 0 and result["loaded"] == [], result
    assert _masked(status["out"], home) == STATUS
    # the same text where pandas is loaded (this process), also at 80 and 40 columns (wrapped, cut, dropped)
    for columns, results in ((400, (status, runs, sql)), (80, _probe([*base, "status"], columns=80)),
                             (40, _probe([*base, "status"], columns=40))):
        monkeypatch.setenv("COLUMNS", str(columns))
        for result, args in zip(results, (["status"], ["runs", "--all"], ["sql", SQL])):
            assert in_process(home, *args).stdout == result["out"], (columns, args)
    assert "quickstart" in runs["out"] and "gloo timed out after 300 s" in runs["out"]  # markers, error lines
    assert re.search(r"^\S+ +ops +\{.*\} +completed +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +\d+$", sql["out"], re.M), \
        sql["out"]  # JSON, timestamp and integer cells as pandas printed them


def test_status_of_an_empty_workspace(workspace):
    (result,) = _probe(["--home", str(workspace.home), "status"], columns=80)
    assert result["code"] == 0 and result["loaded"] == [], result
    assert _masked(result["out"], workspace.home) == EMPTY_STATUS
