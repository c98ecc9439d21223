"""`pmdb collect comms` and `pmdb collect import-comms` as a user runs them: the sweeps as real processes (their ranks,
torchrun, SIGTERM), the commands around them in this process (:func:`harness.in_process`: the same ``main``, output
captured; each process start costs a second or more)."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import in_process

VENV_BIN = Path(sys.executable).parent


def pmdb(home, *args, check=True, env=None):
    proc = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), *args], capture_output=True,
                          text=True, timeout=300, env=env)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def here(home, *args, check=True):
    """``pmdb --home HOME ARGS`` in this process, checked as :func:`pmdb`."""
    proc = in_process(home, *args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def one_line_error(proc, pattern):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr and len(lines) == 1 and re.search(pattern, lines[0]), proc.stderr


def curves(home):
    return json.loads(here(home, "sql", "--query", "comm_curves", "--format", "json").stdout)


def test_import_the_seven_shared_a100_files(tmp_path, shared_data):
    home = tmp_path / "ws"
    here(home, "init")
    files = sorted((shared_data / "collectives" / "vtrain_a100_allreduce").glob("AR_GPU*.csv"))
    assert len(files) == 7
    out = here(home, "collect", "import-comms", *map(str, files), "--format", "nccl-tests",
               "--platform", "a100-sxm4-8x", "--topology", "8x A100 SXM4 80GB, NVSwitch").stdout
    assert len(re.findall(r"^imported .*AR_GPU\d\.csv: 2048 rows \(all_reduce, world size \d\)$", out, re.M)) == 7
    again = here(home, "collect", "import-comms", str(files[0]), "--format", "nccl-tests",
                 "--platform", "a100-sxm4-8x").stdout
    assert "skipped" in again and "already imported" in again
    got = curves(home)
    assert {r["world_size"] for r in got} == set(range(2, 9))
    assert {(r["platform"], r["collective"], r["split_kind"], r["sources"]) for r in got} == \
        {("a100-sxm4-8x", "all_reduce", "equal", "nccl-tests")}
    assert all(r["n_rows"] == 2 for r in got)  # out-of-place and in-place per size
    assert len(got) == 7 * 1024
    bad = tmp_path / "AR_GPU9.csv"
    bad.write_text("size(B),count,type,time(ns),busbw(GB/s)\n1048576,262144,float,44210,x\n")
    one_line_error(here(home, "collect", "import-comms", str(bad), "--format", "nccl-tests", "--platform", "p",
                        check=False), r"^pmdb: error: .*AR_GPU9.csv:2: busbw is 'x', not a number$")
    one_line_error(here(home, "collect", "import-comms", str(files[0]), "--format", "csv", "--platform", "p",
                        check=False), r"bad --format 'csv'")


@pytest.mark.slow
def test_comms_world_size_4_is_oversubscribed_and_stored(tmp_path):
    home = tmp_path / "ws"
    here(home, "init")
    proc = pmdb(home, "collect", "comms", "--world-size", "4", "--ops", "all_reduce,all_to_allv",
                "--min-bytes", "64", "--max-bytes", "4KiB", "--factor", "64", "--iters", "3", "--warmup", "1",
                "--random-splits", "1", "--no-progress")
    assert "oversubscribed" in proc.stderr
    assert re.search(r"run \w+: 4 steps, 20 rows on .* \(world size 4, gloo, 1 thread\(s\) per rank, "
                     r"oversubscribed\)", proc.stdout)
    assert "all_reduce us" in proc.stdout and "all_to_allv GB/s" in proc.stdout
    got = curves(home)
    assert {(r["collective"], r["world_size"], r["split_kind"]) for r in got} == \
        {("all_reduce", 4, "equal"), ("all_to_allv", 4, "random")}
    summary = json.loads(here(home, "sql", "SELECT summary FROM collection_runs", "--format", "json")
                         .stdout)[0]["summary"]
    assert json.loads(summary)["oversubscribed"] is True


@pytest.mark.slow
def test_comms_under_torchrun_only_rank_0_writes(tmp_path):
    home = tmp_path / "ws"
    here(home, "init")
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run([str(VENV_BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "pmdb",
                           "--home", str(home), "collect", "comms", "--ops", "all_reduce,all_gather",
                           "--max-bytes", "1KiB", "--factor", "16", "--iters", "3", "--warmup", "1",
                           "--no-progress"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "rank 1: measured 6 steps" in proc.stdout and re.search(r"run \w+: 6 steps, 18 rows", proc.stdout)
    runs = json.loads(here(home, "sql", "SELECT args->>'launcher' AS launcher, status FROM collection_runs",
                           "--format", "json").stdout)
    assert runs == [{"launcher": "torchrun", "status": "completed"}]
    assert {r["world_size"] for r in curves(home)} == {2}


@pytest.mark.parametrize("args, pattern", [
    (["--ops", "all_reduce,broadcast"], r"unknown collective\(s\) broadcast"),
    (["--max-bytes", "lots"], r"bad size 'lots'"),
    (["--iters", "0"], r"--iters \(0\) and --warmup"),
    (["--factor", "1"], r"bad --factor 1"),
    (["--world-size", "1"], r"at least 2 ranks"),
    (["--threads", "0"], r"bad --threads 0"),
])
def test_comms_user_mistakes(tmp_path, args, pattern):
    # refused before anything runs or opens the store (no workspace needed)
    one_line_error(here(tmp_path / "ws", "collect", "comms", *args, check=False), pattern)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid:
                    out.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return out


@pytest.mark.slow
def test_sigterm_interrupts_the_sweep_and_leaves_no_rank(tmp_path):
    import signal
    import time
    home = tmp_path / "ws"
    here(home, "init")
    proc = subprocess.Popen([sys.executable, "-m", "pmdb", "--home", str(home), "collect", "comms", "--ops",
                             "all_reduce", "--max-bytes", "64", "--iters", "100000", "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        ranks: list[int] = []
        while time.monotonic() < deadline and len(ranks) < 2:
            time.sleep(0.3)
            ranks = [c for c in _children(proc.pid)
                     if b"spawn_main" in Path(f"/proc/{c}/cmdline").read_bytes()]
        assert len(ranks) == 2, "the ranks never started"
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err  # (typer 0.29 turns the interruption into exit code 130 silently)
    time.sleep(0.5)
    assert not [r for r in ranks if Path(f"/proc/{r}").exists()
                and Path(f"/proc/{r}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"]
    runs = json.loads(here(home, "sql", "SELECT status FROM collection_runs", "--format", "json").stdout)
    assert runs == [{"status": "interrupted"}]
    assert json.loads(here(home, "sql", "SELECT count(*) AS n FROM collective_measurements", "--format",
                           "json").stdout) == [{"n": 0}]
