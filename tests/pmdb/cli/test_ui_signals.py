"""`pmdb ui` started in the background, as a non-interactive shell's `pmdb ui &` starts it (SIGINT ignored), stops
with its MLflow server and every process under it on SIGINT and on SIGTERM. Real processes, real signals."""
import os
import signal
import subprocess
import sys

import pytest

from pmdb.config import Workspace

from harness import copy_workspace, descendants, free_port, wait_for_http

ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _background() -> None:
    """What a non-interactive shell does for `cmd &`: the job ignores SIGINT."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_background_ui_stops_with_its_server_on_signal(tmp_path, mlflow_template, signum):
    ws = Workspace(copy_workspace(mlflow_template.home, tmp_path / "ws"))   # its MLflow store made once per run
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pmdb", "--home", str(ws.home), "ui", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                            start_new_session=True, preexec_fn=_background)
    children: list[int] = []
    try:
        status = wait_for_http(proc, port, 150)
        assert status == 200, proc.poll()
        children = descendants(proc.pid)
        assert children, "the UI runs in child processes"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for pid in children:  # never leave a server behind, whatever the outcome
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    left = [pid for pid in children if _alive(pid)]
    assert proc.returncode == 0, err
    assert "MLflow UI stopped" in out, (out, err)
    assert left == [], f"still running after {signum.name}: {left}"
