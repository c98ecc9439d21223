"""The multi-rank launcher with real processes and a real gloo process group."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from collectors.launch import RankFailed, free_port
from collectors.workloads.runner import launch

pytestmark = pytest.mark.slow


@pytest.fixture
def targets(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the ranks import rank_targets by name
    import rank_targets
    return rank_targets


def test_results_come_back_in_rank_order(targets):
    out = launch(targets.all_reduce_rank, 3, 10)
    assert [r["rank"] for r in out] == [0, 1, 2]
    assert [r["env_rank"] for r in out] == ["0", "1", "2"]
    assert all(r["sum"] == 10 * 3 + 0 + 1 + 2 for r in out)
    assert len({r["pid"] for r in out}) == 3


def test_a_failing_rank_fails_the_launch_with_its_message(targets):
    started = time.monotonic()
    with pytest.raises(RankFailed) as info:
        launch(targets.fail_on_rank_one, 2, "table 7 is corrupt")
    assert info.value.rank == 1
    assert "ValueError: table 7 is corrupt" in str(info.value)
    assert "fail_on_rank_one" in info.value.details  # the remote traceback
    assert time.monotonic() - started < 30  # rank 0, blocked in a barrier, was stopped


def test_a_dying_rank_is_reported_with_exit_code_and_log(targets, tmp_path):
    with pytest.raises(RankFailed) as info:
        launch(targets.die_on_rank_one, 2, 3, log_dir=tmp_path)
    assert info.value.rank == 1 and "exited with code 3" in str(info.value)
    assert "about to die" in info.value.details


def test_timeout(targets):
    with pytest.raises(RankFailed, match="timed out"):
        launch(targets.die_on_rank_one, 1, 0, timeout_s=1)


def test_free_port_is_bindable():
    import socket
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
    assert 1024 <= port <= 65535


@pytest.mark.parametrize("plan, world_size", [([1, 0, 2, 1, 0], 3), ([1, 1, 1], 2), ([0, 1, 0, 1], 2)])
def test_dlrm_exchange_routes_rows_and_gradients(targets, plan, world_size):
    out = launch(targets.exchange_check, world_size, (plan, 4, 6 * world_size))
    for result in out:
        assert result["shape"] == [6, 4 * len(plan)]
        assert result["forward"] == 0.0 and result["backward"] == 0.0


def test_the_parent_of_a_run_reads_requests_without_torch():
    """What the parent of `collect workload` imports to build a request and launch leaves torch to the ranks' fork
    server (seconds per run on a 2-core host)."""
    import subprocess
    import sys

    import glob

    from collectors.workloads.requests import GPU_DEVICE_FILES

    code = ("import sys\nfrom collectors.workloads import collect, requests, runner, transformer_shape, worker\n"
            "print(requests.default_threads(), sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n"
            "print(requests.device_for(1), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[:2] == ["1", "[]"]
    if not any(glob.glob(pattern) for pattern in GPU_DEVICE_FILES):   # a GPU host asks torch, rightly
        assert out.split()[2:] == ["cpu", "False"]


def test_a_fork_server_started_ahead_serves_the_launch_with_its_environment(tmp_path):
    """prestart returns while the server imports; the launch after it forks its ranks from that server, which holds
    the start environment (in a fresh interpreter: this process may have a fork server already)."""
    import subprocess
    import sys

    code = f"""
import os, sys, time
sys.path.insert(0, {str(Path(__file__).parent)!r})
from collectors import launch
started = time.monotonic()
launch.prestart(("json",), {{"PMDB_PRESTART_CHECK": "yes"}})
assert time.monotonic() - started < 1.0, "prestart waited for the server"
assert "PMDB_PRESTART_CHECK" not in os.environ
from multiprocessing import forkserver
server = forkserver._forkserver._forkserver_pid
import rank_targets
out = launch.launch(rank_targets.environment_rank, 2, "PMDB_PRESTART_CHECK", preload=("json",))
assert all(r["value"] == "yes" and r["parent"] == server for r in out), (out, server)
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
