"""`pmdb fit`, `pmdb models`, `pmdb models promote` and `pmdb ui` as a user runs them: `pmdb ui` and a first `pmdb
fit` as real processes, the other commands in this process (:func:`harness.in_process`: the same ``main``, output
captured; no process boundary is under test there and each start costs seconds)."""
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from fitters.collective import CollectiveParams, bus_factor, curve
from fitters.fit import FitOptions, fit_models
from pmdb import platform as platforms
from pmdb.config import Workspace
from pmdb.store import Store

from harness import descendants, free_port, in_process, wait_for_http

PLATFORM = "cli-box"


def pmdb(home, *args, timeout=300):
    """A real ``python -m pmdb --home HOME ARGS`` process."""
    return subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=timeout)


here = in_process  # ``pmdb --home HOME ARGS`` in this process


def one_line_error(proc, pattern):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(pattern, lines[0]) and "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def home(tmp_path_factory, mlflow_template):
    """A workspace (MLflow store created: a copy of the run's template) with an all_reduce sweep and six bmm rows on
    platform cli-box."""
    from harness import copy_workspace

    ws = Workspace(copy_workspace(mlflow_template.home, tmp_path_factory.mktemp("cli") / "ws"))
    with Store.open(ws) as store:
        platforms.ensure_named(store, PLATFORM, device_kind="cpu")
        sizes = 2.0 ** np.arange(2, 26)
        params = CollectiveParams.continuous(2 ** 12, 2 ** 22, 40.0, 2.0, 0.6, 17.0, bus_factor("all_reduce", 2))
        times = curve(params, bus_factor("all_reduce", 2), sizes)
        with store.run("comms", PLATFORM) as run:
            store.insert("collective_measurements", [
                {"run_id": run.run_id, "platform": PLATFORM, "collective": "all_reduce", "backend": "gloo",
                 "world_size": 2, "split_kind": "equal", "total_bytes": int(2 * s), "max_rank_bytes": int(s),
                 "lat_p50_us": float(t), "source": "measured"} for s, t in zip(sizes, times)])
            for i in range(6):
                store.insert_one("op_measurements", {
                    "run_id": run.run_id, "platform": PLATFORM, "op": "bmm", "pass": "fwd", "implementation": "torch",
                    "dtype": "float32", "device": "cpu", "cache_state": "cold", "params": {"B": 2, "M": 8 + i, "N": 8,
                    "K": 8}, "config_key": f"k{i}", "median_us": 10.0 + i})
    return ws.home


def test_fit_needs_a_selection_and_enough_data(home):
    one_line_error(here(home, "fit", "--platform", PLATFORM), r"--op NAME .* or --all")
    one_line_error(here(home, "fit", "--op", "bmm", "--platform", PLATFORM),
                   r"too little data.*bmm fwd \(torch, float32, cold\): 6 rows")


def test_fit_models_and_promote(home):
    fitted = pmdb(home, "fit", "--op", "all_reduce", "--platform", PLATFORM, "--no-progress")
    assert fitted.returncode == 0, fitted.stderr
    name = f"all_reduce.ws2~{PLATFORM}"   # the fit table leaves out '@<platform>' (printed below it)
    assert "all_reduce.ws2" in fitted.stdout and name not in fitted.stdout, fitted.stdout
    assert f"1 model versions registered on {PLATFORM}" in fitted.stdout, fitted.stdout
    with Store.open(Workspace(home)) as store:  # a second version, fitted in-process (saves a process start)
        fit_models(store, Workspace(home), PLATFORM, FitOptions(ops=["all_reduce"], progress=False))
    listed = json.loads(here(home, "models", "--platform", PLATFORM, "--all", "--format", "json").stdout)
    assert [(r["version"], r["aliases"]) for r in listed] == [(2, "champion,latest"), (1, None)], listed
    assert all(r["gmae_pct"] < 1.0 and r["n_test"] == 4 for r in listed), listed  # exact curve: ~0 held-out error
    promoted = here(home, "models", "promote", name, "1")
    assert promoted.returncode == 0 and "champion -> version 1" in promoted.stdout, promoted.stderr
    champion = json.loads(here(home, "models", "--alias", "champion", "--format", "json").stdout)
    assert [r["version"] for r in champion] == [1], champion
    default = json.loads(here(home, "models", "--format", "json").stdout)  # each name's champion
    assert [(r["name"], r["version"]) for r in default] == [(name, 1)], default
    one_line_error(here(home, "models", "promote", name, "9"), r"has no version 9")


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_ui_answers_on_localhost_and_stops_cleanly(home):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "pmdb", "--home", str(home), "ui", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal:
    # a test run started in the background by a non-interactive shell ignores SIGINT, and so would the child
    try:
        status = wait_for_http(proc, port, 120)
        assert status == 200, proc.poll()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/ajax-api/2.0/mlflow/experiments/search?max_results=5",
                                    timeout=10) as response:
            assert "experiments" in json.loads(response.read())
        children = descendants(proc.pid)
        assert children, "the UI runs in child processes"
        proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert f"http://127.0.0.1:{port}" in out and "stopped" in out
    time.sleep(0.5)
    assert [pid for pid in children if _alive(pid)] == []
