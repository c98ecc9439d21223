"""The CPU-visible parts of benchmarks/gpu_source_table.sh (a lent GPU's kernel table and burst/sustained probe):
the scripts parse and answer --help, bad options exit 2 with one line; the probe's phases run on CPU and write their
CSV; the exported table imports into another store as a GPU's device rows, timings unchanged. (`gpu_source_table.sh
--cpu` runs every step on this CPU; on a GPU its sweep is `pmdb collect ops` on CUDA, tests/gpu.)"""
import csv
import gzip
import json
import subprocess
from pathlib import Path

import pytest
from harness import cli, load_benchmark

from pmdb import platform as platforms
from pmdb.config import Workspace
from pmdb.store import Store

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_source_table.sh"
# a sheet for the receiving store's GPU (NeuSight's fields; the H200's figures)
SHEET = {"Device": "NVIDIA H200", "Dev_Mem": 141, "Mem_Bw": 4800, "Num_Sm": 132, "Core_Per_SM": 128, "Freq": 1980,
         "SingleFLOPs": 66908, "L2Cache": 60}


def test_scripts_parse_and_refuse_bad_options():
    for script in (SCRIPT, ROOT / "benchmarks" / "gpu_env.sh", ROOT / "benchmarks" / "gpu_check.sh"):
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script
    shown = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "--cpu" in shown.stdout and "--minutes" in shown.stdout
    for args, message in ((["--bogus"], "unknown option --bogus"), (["--sample", "0"], "--sample takes a whole"),
                          (["--minutes", "x"], "--minutes takes a number")):
        bad = subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=30)
        assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and message in bad.stderr, (args, bad.stderr)


def test_probe_runs_its_phases_and_writes_the_csv(tmp_path):
    probe = load_benchmark("gpu_sustained_probe")
    import torch

    rows = probe.run(torch.device("cpu"), seconds=0.05, out=tmp_path, idle_s=0.0)
    assert [r["name"] for r in rows] == [name for name, _, _ in probe.CPU_SHAPES]
    for row in rows:
        for key in ("single_call_us", "back_to_back_us", "sustained_first_us", "sustained_last_us"):
            assert 0 < row[key] < 1e5, (row["name"], key)
        assert row["sustained_windows"] >= 4
    with open(tmp_path / "sustained_probe.csv") as handle:
        written = list(csv.DictReader(handle))
    assert [r["sizes"] for r in written] == ["64x64x64", "256x256", "64x128"]
    assert tuple(written[0]) == probe.COLUMNS
    assert probe.main(["--device", "cpu", "--seconds", "0", "--out", str(tmp_path)]) == 2


def test_clock_samples_are_summarised_per_phase():
    """The medians of the nvidia-smi samples inside a phase's window, and the throttle reasons seen most there."""
    probe = load_benchmark("gpu_sustained_probe")
    sampler = probe.Sampler()
    sampler.rows += [(0.5, 1980.0, 90.0, "0x0"), (1.5, 1980.0, 600.0, "0x0"), (1.6, 1755.0, 700.0, "0x4"),
                     (1.7, 1740.0, 700.0, "0x4"), (9.0, 1000.0, 50.0, "0x1")]
    assert sampler.between(1.0, 2.0) == (1755.0, 700.0, "0x4")
    assert sampler.between(0.0, 1.0) == (1980.0, 90.0, "0x0")
    clock, power, reasons = sampler.between(3.0, 4.0)
    assert clock != clock and power != power and reasons == ""   # no samples: NaN


def test_the_export_imports_as_the_gpus_device_rows(workspace, tmp_path, capsys):
    export = load_benchmark("gpu_table_export")
    with Store.open(workspace) as store:
        name = platforms.register_local(store)["name"]
        with store.run("ops", name, {}) as run:
            for key, op, params, us in (("a", "fully_connected", {"B": 1, "M": 1024, "N": 5120, "K": 1280}, 317.1),
                                        ("b", "fully_connected", {"B": 1, "M": 64, "N": 64, "K": 64}, 4.2),
                                        ("c", "add", {"M": 1024, "N": 1280}, 4.19)):
                store.insert_one("op_measurements", {
                    "run_id": run.run_id, "platform": name, "op": op, "pass": "fwd", "implementation": "torch",
                    "dtype": "float32", "device": "cuda:0", "cache_state": "device", "params": params,
                    "config_key": key, "median_us": us, "single_call_us": us + 20.0, "back_to_back_us": us + 8.0,
                    "threads": 1})
    out = tmp_path / "table"
    assert export.main([str(workspace.home), str(out)]) == 0
    assert "fully_connected  fwd     2" in capsys.readouterr().out
    with gzip.open(out / "timings.csv.gz", "rt") as handle:
        timings = list(csv.DictReader(handle))
    assert [(t["op"], float(t["single_call_us"]) - float(t["median_us"])) for t in timings] == [
        ("fully_connected", 20.0), ("fully_connected", 20.0), ("add", 20.0)]

    other = Workspace(tmp_path / "other")
    sheet = tmp_path / "NVIDIA_H200.json"
    sheet.write_text(json.dumps(SHEET))
    assert cli(other.home, "init")[0] == 0
    assert cli(other.home, "platform-specs", sheet, "--name", "h200-table")[0] == 0
    code, _, err = cli(other.home, "collect", "import-ops", out / "kernels.csv.gz", "--format", "generic",
                       "--platform", "h200-table")
    assert code == 0, err
    with Store.open(other, read_only=True) as store:
        got = store.query("SELECT op, cache_state, CAST(params AS VARCHAR) AS p, median_us FROM v_op_measurements "
                          "ORDER BY median_us")
    assert got["cache_state"].unique().tolist() == ["device"]
    assert got["median_us"].round(2).tolist() == [4.19, 4.2, 317.1]            # device times as measured
    assert json.loads(got["p"].iloc[2]) == {"B": 1, "K": 1280, "M": 1024, "N": 5120}
    assert export.main([str(other.home), str(tmp_path / "none"), "--platform", "nope"]) == 2
    with pytest.raises(SystemExit):
        export.main([])
