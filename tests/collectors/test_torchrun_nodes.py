"""Several nodes simulated on this host: two real `torchrun` agents (--nnodes 2, --node-rank 0 and 1, one process
each, gloo) run `pmdb collect comms`; rank 0 stores the sweep. Commands that start their own ranks refuse to run
inside a torchrun job."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from collectors.launch import free_port, launch, under_launcher
from pmdb.errors import PmdbError

VENV_BIN = Path(sys.executable).parent
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                 "TORCHELASTIC_RUN_ID")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}


@pytest.mark.slow
def test_two_torchrun_nodes_on_this_host_store_one_sweep(tmp_path):
    home = tmp_path / "ws"
    env = _clean_env()
    init = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), "init"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert init.returncode == 0, init.stderr
    port = free_port()
    nodes = []
    for node_rank in (0, 1):
        command = [str(VENV_BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank",
                   str(node_rank), "--master-addr", "127.0.0.1", "--master-port", str(port),
                   "-m", "pmdb", "--home", str(home), "collect", "comms", "--ops", "all_reduce",
                   "--min-bytes", "4", "--max-bytes", "64", "--factor", "16", "--iters", "3", "--warmup", "1",
                   "--no-progress"]
        nodes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                      start_new_session=True))
    outputs = []
    try:
        for node in nodes:
            outputs.append(node.communicate(timeout=300))
    finally:
        for node in nodes:  # a node whose peer failed waits for it: stop what we started
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait()
    for node, (out, err) in zip(nodes, outputs):
        assert node.returncode == 0, err[-3000:]
    assert "rank 1: measured 2 steps (rank 0 stores them)" in outputs[1][0]
    assert "6 rows on" in outputs[0][0] and "(world size 2, gloo" in outputs[0][0]
    with duckdb.connect(str(home / "pmdb.duckdb"), read_only=True) as conn:
        runs = conn.execute("SELECT args->>'launcher', status, args->>'world_size' FROM collection_runs").fetchall()
        rows = conn.execute("SELECT world_size, rank, count(*) FROM collective_measurements GROUP BY ALL "
                            "ORDER BY rank NULLS FIRST").fetchall()
    assert runs == [("torchrun", "completed", "2")]
    assert rows == [(2, None, 2), (2, 0, 2), (2, 1, 2)]  # per size: the aggregate row and each rank's own


def test_launch_refuses_inside_a_torchrun_job(monkeypatch):
    assert under_launcher({"PATH": "/bin"}) is None
    assert under_launcher({"TORCHELASTIC_RUN_ID": "none", "RANK": "1", "WORLD_SIZE": "2"}) == "RANK=1, WORLD_SIZE=2"
    for key, value in {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(PmdbError, match=r"cannot run inside a torchrun job \(RANK=1, WORLD_SIZE=2\)"):
        launch(print, 2, None)


def test_collect_workload_under_torchrun_says_so_in_one_line(workspace, monkeypatch, capsys):
    """`pmdb collect workload` joins a torchrun job (tests/collectors/workloads/test_torchrun_workload.py); what it
    cannot do there it refuses in one line before any run starts."""
    from pmdb.cli.main import main

    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                       "TORCHELASTIC_RUN_ID": "none"}.items():
        monkeypatch.setenv(key, value)
    code = main(["--home", str(workspace.home), "collect", "workload", "dlrm", "--no-trace", "--iters", "1",
                 "--warmup", "1", "--repeats", "2"])
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pmdb:")]
    assert code == 2 and len(err) == 1 and "a torchrun job cannot" in err[0], err
    with duckdb.connect(str(workspace.db_path), read_only=True) as conn:
        statuses = conn.execute("SELECT kind, status FROM collection_runs").fetchall()
    assert statuses == []
