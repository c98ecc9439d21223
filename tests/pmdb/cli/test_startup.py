"""Start-up: `pmdb --help` and the read-only commands load neither torch nor MLflow nor transformers (seconds of
imports); only the commands that measure, fit or predict do. `pmdb --help` loads no command module, hence neither
pandas, numpy nor DuckDB (pmdb.cli.lazy). The commands run one after another in a fresh interpreter, which reports
the packages loaded after each."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "mlflow", "transformers", "fbgemm_gpu")
NOT_FOR_HELP = ("pandas", "numpy", "duckdb", "pyarrow", "pmdb.store")
CLI_FOR_HELP = {"pmdb.cli", "pmdb.cli.main", "pmdb.cli.lazy", "pmdb.cli.common", "pmdb.cli.text_table"}

_PROBE = """
import contextlib, io, json, sys
from pmdb.cli.main import main
for args in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()):
        code = main(args)
    print(json.dumps({"args": args, "code": code, "loaded": [m for m in %r if m in sys.modules],
                      "cli": sorted(m for m in sys.modules if m.startswith("pmdb.cli"))}))
""" % (HEAVY + NOT_FOR_HELP,)


def _run(*commands: list[str]) -> list[dict]:
    """Per command (run in order in one fresh interpreter): its exit code and the heavy packages loaded so far."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "COLUMNS": "80"}
    done = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(commands)], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_help_and_read_only_commands_import_no_torch_mlflow_or_transformers(tmp_path: Path):
    home = ["--home", str(tmp_path / "ws")]
    results = _run(["--help"], [*home, "init"], [*home, "status"], [*home, "runs"],
                   [*home, "sql", "--query", "prediction_vs_baseline"], [*home, "errors"])
    assert len(results) == 6
    assert results[0]["code"] == 0 and results[0]["loaded"] == [], results[0]
    assert set(results[0]["cli"]) <= CLI_FOR_HELP, results[0]  # no command module
    for result in results[1:]:
        assert result["code"] == 0 and not set(result["loaded"]) & set(HEAVY), result
    assert "pmdb.cli.predict" not in results[3]["cli"], results[3]  # status and runs: their module only

