"""Fault-injection helpers: real `pmdb` child processes, their progress, and a prepared workspace."""
from __future__ import annotations

import os
import signal
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import duckdb
import pytest

from harness import copy_workspace  # noqa: E402 (tests/ on sys.path: tests/conftest.py)

PMDB = [sys.executable, "-m", "pmdb.cli.main"]
# Eight fast roofline ops of the quick sweep: 96 configs, 384 rows, about 10 s on 2 cores.
QUICK_OPS = ["relu", "gelu", "add", "mul", "sigmoid", "tanh", "softmax", "dropout"]
_PROGRESS = re.compile(rb"(\d+)/(\d+) \[")


def _sigint_as_in_a_terminal() -> None:
    """In the child before exec: SIGINT as a foreground command in a terminal has it. A test run started in the
    background by a non-interactive shell (as CI may be) ignores SIGINT, the children inherit that and a Ctrl-C
    sent by the test would be ignored like any background job's."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class Child:
    """A running `pmdb` child process whose stderr (tqdm progress included) is read as it comes."""

    def __init__(self, args: list[str], **popen: object):
        # no bytecode written: a child under a file-size limit (disk full) would leave truncated .pyc files in the
        # checkout (importlib does not check a short write), and every later import of that module would fail
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "PYTHONDONTWRITEBYTECODE": "1"}
        own = popen.pop("preexec_fn", None)   # a test's own set-up in the child (e.g. a disk-full mount)

        def before_exec() -> None:
            _sigint_as_in_a_terminal()
            if own is not None:
                own()
        self.proc = subprocess.Popen([*PMDB, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     preexec_fn=before_exec, **popen)
        self.err = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(4096), b""):
            self.err.extend(chunk)

    def configs_done(self) -> int:
        found = _PROGRESS.findall(bytes(self.err))
        return int(found[-1][0]) if found else 0

    def wait_for(self, done: Callable[["Child"], bool], timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while not done(self):
            if self.proc.poll() is not None:
                raise AssertionError(f"child ended early ({self.proc.returncode}): {bytes(self.err)[-800:]!r}")
            if time.monotonic() > end:
                self.proc.kill()
                raise AssertionError("child made no progress in time")
            time.sleep(0.1)

    def finish(self, timeout: float = 120.0) -> tuple[int, str, str]:
        out = self.proc.stdout.read().decode()
        self.proc.wait(timeout)
        self._reader.join(10)
        return self.proc.returncode, out, bytes(self.err).decode(errors="replace")


def run_pmdb(home: Path, *args: str, **popen: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    return subprocess.run([*PMDB, "--home", str(home), *args], capture_output=True, text=True, env=env,
                          timeout=300, **popen)


def last_line(stderr: str) -> str:
    """The last non-empty line of stderr, tqdm's carriage-return frames dropped."""
    lines = [line.split("\r")[-1].strip() for line in stderr.splitlines()]
    return [line for line in lines if line][-1]


def quick_sweep_args(home: Path) -> list[str]:
    return ["--home", str(home), "collect", "ops", "--sweep", "quick", "--no-peaks",
            *[a for op in QUICK_OPS for a in ("--op", op)]]


def query(home: Path, sql: str, params: list | None = None) -> list[tuple]:
    """Read the store directly (read-only DuckDB, no pmdb code in between)."""
    with duckdb.connect(str(home / "pmdb.duckdb"), read_only=True) as conn:
        return conn.execute(sql, params or []).fetchall()


@pytest.fixture(scope="session")
def registered_home(tmp_path_factory) -> Path:
    """A workspace with this machine registered by real `pmdb init` and `pmdb platform` processes, once per test
    run (shared by the workers, :func:`harness.built_once`; two processes, seconds each): tests get copies
    (:func:`home`). Read only."""
    from harness import built_once

    def build(folder: Path) -> None:
        for args in (["init"], ["platform"]):
            done = run_pmdb(folder / "ws", *args)
            assert done.returncode == 0, done.stderr
    return built_once(tmp_path_factory, "registered", build) / "ws"


@pytest.fixture
def home(tmp_path: Path, registered_home: Path) -> Path:
    """This test's own copy of :func:`registered_home` (a workspace with this machine registered)."""
    return copy_workspace(registered_home, tmp_path / "ws")


@pytest.fixture(scope="session")
def fitted_twice_once(tmp_path_factory, mlflow_template):
    """test_mlflow_mirror's workspace fitted twice, built once for the modules that copy it (tests/conftest.py runs
    them on one worker): two fits and an MLflow store, seconds of CPU, no longer once per module."""
    from .test_mlflow_mirror import build_fitted_twice
    return build_fitted_twice(tmp_path_factory, mlflow_template)
