"""The CPU-visible parts of benchmarks/gpu_check.sh: the script parses (bash -n), answers --help and refuses an
unknown option; its report reads a real store and the step log. (`gpu_check.sh --cpu` runs every step on CPU; the
CUDA steps themselves are tests/gpu.)"""
import subprocess
from pathlib import Path

from harness import load_benchmark

from pmdb import platform as platforms

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _report_module():
    return load_benchmark("gpu_check_report")


def test_scripts_parse_and_answer_help():
    for script in (SCRIPT, ROOT / "benchmarks" / "gpu_wheels.sh"):
        assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, script
    shown = subprocess.run(["bash", str(SCRIPT), "--help"], capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "--cpu" in shown.stdout
    bad = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and "unknown option --bogus" in bad.stderr


def test_report_reads_the_store_and_the_step_log(workspace, tmp_path):
    from pmdb.store import Store

    with Store.open(workspace) as store:
        name = platforms.register_local(store)["name"]
        with store.run("ops", name, {}) as run:
            for key, median in (("k1", 4.0), ("k2", 6.0)):
                store.insert_one("op_measurements", {
                    "run_id": run.run_id, "platform": name, "op": "relu", "pass": "fwd", "implementation": "torch",
                    "dtype": "float32", "device": "cpu", "cache_state": "cold", "params": {"M": 1, "N": 64},
                    "config_key": key, "median_us": median, "threads": 1})
    log = tmp_path / "steps.log"
    log.write_text("init 0 5.5\nmine-traces skip 0 a CPU trace has no GPU kernels\nfit 2 30.3\n")
    text = _report_module().report(workspace.home, log)
    assert text.startswith("# GPU check: CPU: ")
    assert "| relu | fwd | microbenchmark | cold | 2 | 5.00 | - | - |" in text
    assert "1 of 3 steps exited 0; skipped: mine-traces; failed: fit." in text
    import duckdb

    assert "| duckdb |" in text and f"| {duckdb.__version__} |" in text  # the versions table
