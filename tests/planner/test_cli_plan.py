"""`pmdb plan`, `pmdb plan sweep`, `pmdb plan validate` as a user runs them."""
import json
import re
import subprocess
import sys

import pandas as pd
import pytest

from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store

from harness import in_process

TINY = {"seq_len": 128, "hidden": 256, "heads": 4, "layers": 4, "vocab": 1000}


def _one_line_error(capsys, argv, pattern):
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err and re.search(pattern, lines[0]), err


def test_plan_sweep_end_to_end(tmp_path):
    home = tmp_path / "ws"
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps(TINY))

    def pmdb(*args):
        proc = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), *args], capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc

    assert in_process(home, "init").returncode == 0        # in this process; the plans as real processes
    out = pmdb("plan", "--model", str(model), "--gpus", "8", "--global-batch", "16", "--system", "a100",
               "--strategy", "all", "--top", "4", "--format", "json", "--quiet")
    rows = json.loads(out.stdout)
    assert [r["rank"] for r in rows] == [1, 2, 3, 4]
    assert [r["time_s"] for r in rows] == sorted(r["time_s"] for r in rows)
    assert re.search(r"evaluated \d+ configurations .* study 1 stored", out.stderr)
    plot = tmp_path / "sweep.png"
    pmdb("plan", "sweep", "--model", str(model), "--gpus", "4,8", "--global-batch", "16", "--systems", "a100,h100",
         "--top", "2", "--plot", str(plot), "--quiet")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Store.open(Workspace(home), read_only=True) as store:
        studies = store.query("SELECT system_name, gpus, best_time_s FROM v_plan_studies ORDER BY study_id")
        configs = store.query("SELECT * FROM plan_configs WHERE study_id = 1 ORDER BY position")
        kinds = store.query("SELECT kind, status FROM collection_runs")
    assert len(studies) == 5 and list(studies["gpus"][1:]) == [4, 8, 4, 8]
    swept = studies.iloc[1:].groupby("system_name")["best_time_s"]
    assert swept.apply(lambda s: s.iloc[1] < s.iloc[0]).all()        # 8 GPUs are faster than 4 on both systems
    assert configs["time_s"].tolist() == pytest.approx([r["time_s"] for r in rows])
    breakdown = pd.DataFrame([json.loads(b) for b in configs["breakdown"]])
    assert breakdown.sum(axis=1).tolist() == pytest.approx(configs["time_s"].tolist())
    assert set(kinds["kind"]) == {"plan"} and set(kinds["status"]) == {"completed"}


def test_validate_command_on_a_few_rows(tmp_path, capsys, shared_data):
    home = tmp_path / "ws"
    assert main(["--home", str(home), "init"]) == 0
    sample = pd.read_csv(shared_data / "megatron_runs" / "a100_single_node_sample.csv").head(6)
    path = tmp_path / "runs.csv"
    sample.to_csv(path, index=False)
    capsys.readouterr()
    assert main(["--home", str(home), "plan", "validate", str(path), "--worst", "3", "--format", "csv"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"6 runs on a100 \(megatron-deepspeed\): MAPE \d+\.\d% +GMAE \d+\.\d%", captured.err)
    assert len(pd.read_csv(pd.io.common.StringIO(captured.out))) == 3
    with Store.open(Workspace(home), read_only=True) as store:
        stored = store.query("SELECT * FROM v_plan_validations ORDER BY row_index")
    assert stored["row_index"].tolist() == list(range(6))
    assert stored["measured_s"].tolist() == pytest.approx((sample["iteration time (ms)"] / 1e3).tolist())
    assert (stored["predicted_s"] > 0).all()


@pytest.mark.parametrize("args, pattern", [
    (["plan", "--model", "gpt3-175b", "--global-batch", "8"], r"needs --model, --gpus and --global-batch"),
    (["plan", "--model", "gpt9", "--gpus", "8", "--global-batch", "8"], r"unknown model 'gpt9'"),
    (["plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--strategy", "3d"], r"bad --strategy"),
    (["plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--system", "platform:nowhere"],
     r"unknown platform 'nowhere'"),
    (["plan", "sweep", "--model", "gpt3-175b", "--gpus", "8,x", "--global-batch", "8"], r"bad --gpus"),
    (["plan", "validate", "/no/such.csv"], r"no such file"),
    (["plan", "--model", "gpt3-175b", "--gpus", "5", "--global-batch", "8"], r"no 1d configuration of gpt3-175b"),
])
def test_user_mistakes_give_one_line(tmp_path, capsys, args, pattern):
    home = tmp_path / "ws"
    assert main(["--home", str(home), "init"]) == 0
    capsys.readouterr()
    _one_line_error(capsys, ["--home", str(home), *args], pattern)


def test_bad_system_file_is_named(tmp_path, capsys):
    home = tmp_path / "ws"
    assert main(["--home", str(home), "init"]) == 0
    bad = tmp_path / "sys.json"
    bad.write_text(json.dumps({"name": "x", "flops": 1}))
    capsys.readouterr()
    _one_line_error(capsys, ["--home", str(home), "plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch",
                             "8", "--system", str(bad)], r"system file .*sys.json: unknown field 'flops'")
    columns = tmp_path / "runs.csv"
    columns.write_text("GPUs,global batch,hidden size\n8,8,1024\n")
    _one_line_error(capsys, ["--home", str(home), "plan", "validate", str(columns)], r"no column for 'micro_batch'")
