"""`pmdb predict` and `pmdb errors`: user mistakes give one line and exit code 2; the tables come from SQL."""
from __future__ import annotations

import pytest

from pmdb.cli.main import main


@pytest.mark.parametrize("args, message", [
    (["predict"], "give exactly one of"),
    (["predict", "--trace-set", "5", "--all"], "give exactly one of"),
    (["predict", "--trace-set", "999"], "no completed trace set 999"),
    (["predict", "--trace-set", "1", "--mode", "guess"], "bad --mode"),
    (["predict", "no-such-run"], "no completed workload run"),
    (["errors", "--by", "colour"], "bad --by"),
    (["errors", "--what", "everything"], "bad --what"),
    (["errors", "--mode", "fast"], "bad --mode"),
    (["errors", "--platform", "nowhere"], "unknown platform 'nowhere'"),
])
def test_user_mistakes_are_one_line(workspace, capsys, args, message):
    code = main(["--home", str(workspace.home), *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("pmdb: error:") and message in err[0]


def test_errors_prints_every_table(workspace, capsys):
    assert main(["--home", str(workspace.home), "errors", "--what", "all", "--by", "platform,family"]) == 0
    out = capsys.readouterr().out
    for title in ("end-to-end prediction errors", "kernel/collective model test errors",
                  "predictions beside the baseline", "two model-version sets",
                  "spec-only GPUs: measured runs inside their predicted range"):
        assert title in out
    assert main(["--home", str(workspace.home), "errors", "--format", "csv", "--what", "e2e"]) == 0
    header = capsys.readouterr().out.strip().splitlines()[0]
    assert header.startswith("platform,family,world_size,mode,model_set_id,n,geomean_pct")
