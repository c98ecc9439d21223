"""One registry shared through a real `mlflow server` (started here on 127.0.0.1 with its own sqlite store and
artifacts directory): `pmdb --tracking-uri URL fit` registers into it, the store's mirror matches it (`pmdb doctor`
says ok), the champion is resolved and its model fetched through the server; $MLFLOW_TRACKING_URI works the same;
without the URI the workspace's registry holds none of the mirrored versions and pmdb says so."""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from pmdb.config import Workspace

from .conftest import cli, one_line_error

START_SECONDS = 90.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def server(tmp_path: Path):
    """A real `mlflow server` on a free port (backend sqlite and artifacts in tmp_path); its URL."""
    root = tmp_path / "server"
    root.mkdir()
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true",
           "DO_NOT_TRACK": "true"}
    env.pop("MLFLOW_TRACKING_URI", None)
    log = open(root / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri",
                             f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination", str(root / "artifacts"),
                             "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"mlflow server did not answer: {(root / 'server.log').read_text()[-2000:]}")
            time.sleep(0.3)
        yield url, root
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
                proc.wait(timeout=15)
                break
            except ProcessLookupError:
                break
            except subprocess.TimeoutExpired:
                continue
        log.close()


@pytest.mark.slow  # a real server starts (~7 s) and every registration crosses HTTP: 15-50 s here
def test_fit_into_a_shared_server_and_resolve_the_champion_through_it(workspace, synthetic, server, monkeypatch):
    from mlflow import MlflowClient

    from fitters.load import load_model
    from fitters.registry import cache_root
    from pmdb.store import Store

    url, root = server
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with Store.open(workspace) as store:
        configs = synthetic.gemm_configs(40)
        synthetic.insert_ops(store, "fully_connected", configs,
                             list(synthetic.noisy([synthetic.gemm_law(c) for c in configs], 0.03, 1)))
        synthetic.insert_peaks(store)
    name = f"fully_connected.fwd.cold~{synthetic.PLATFORM}"
    fit = ["fit", "--op", "fully_connected", "--family", "roofline", "--platform", synthetic.PLATFORM,
           "--no-progress"]
    code, out, err = cli(workspace.home, "--tracking-uri", url, *fit)
    assert code == 0, err
    assert "MLFLOW_TRACKING_URI" not in os.environ  # MLflow's own setting is not left behind for children

    client = MlflowClient(url, url)
    version = client.get_model_version_by_alias(name, "champion")
    with Store.open(workspace, read_only=True) as store:
        mirrored = store.query("SELECT version, mlflow_run_id FROM model_versions WHERE name = ?", [name])
        champion = store.scalar("SELECT version FROM model_aliases WHERE name = ? AND alias = 'champion'", [name])
    assert mirrored.values.tolist() == [[int(version.version), version.run_id]] and champion == int(version.version)
    assert not workspace.mlflow_db.exists()  # nothing went to the workspace's own registry
    assert list((root / "artifacts").rglob("pmdb_model/model.json"))  # the model lives on the server

    code, out, err = cli(workspace.home, "--tracking-uri", url, "doctor")
    assert code == 0, out + err
    assert "the registry holds all 1 mirrored versions" in out

    shutil.rmtree(workspace.artifacts / "model_cache", ignore_errors=True)
    model = load_model(Workspace(workspace.home, url), name, "champion")  # alias resolved by the server
    assert (cache_root(workspace, name, int(version.version)) / "artifacts" / "pmdb_model" / "model.json").is_file()
    shape = {"M": 64, "N": 256, "K": 512}
    assert model.predict(pd.DataFrame([shape]))[0] == pytest.approx(synthetic.gemm_law(shape), rel=0.3)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)  # the environment variable picks the same registry
    code, out, err = cli(workspace.home, *fit)
    assert code == 0, err
    assert sorted(int(v.version) for v in client.search_model_versions(f"name = '{name}'")) == [1, 2]
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    one_line_error(cli(workspace.home, *fit), r"mlflow\.db \(missing\) holds 0 of the 2 versions the store lists")
