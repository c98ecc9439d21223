"""Test harness shared by the test folders (tests/conftest.py puts this folder on sys.path):

* :func:`copy_workspace`: a workspace directory built once per test run, copied for one test (DuckDB file,
  mlflow.db, artifacts), so tests stay independent without rebuilding it;
* :func:`in_process`: ``pmdb --home HOME ARGS`` run by :func:`pmdb.cli.main.main` in this process, with its output
  captured, for tests where no process boundary is under test (a process start imports torch, MLflow: seconds);
  :func:`cli` gives the same as (exit code, stdout, stderr);
* :func:`built_once`: a folder a session fixture builds once for the whole test run, shared by the pytest-xdist
  workers of `make test` instead of built by each;
* :func:`ingest_gpu_trace`: a shared GPU trace folder imported into a store (parsed once per test run,
  :func:`parsed_gpu_trace`).
"""
from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable


def copy_workspace(src: Path, dst: Path) -> Path:
    """Copy workspace directory ``src`` to ``dst`` (which must not exist) and return ``dst``. MLflow keeps absolute
    artifact locations (file URIs, paths) in mlflow.db: in the copy they point into ``dst``, so a test that deletes
    or changes model files never touches ``src``. The source's stores must be closed (no writer running)."""
    src, dst = Path(src).resolve(), Path(dst)
    shutil.copytree(src, dst, symlinks=True)
    mlflow_db = dst / "mlflow.db"
    if mlflow_db.is_file():
        _repoint(mlflow_db, str(src), str(dst.resolve()))
    return dst


def built_once(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` that ``build(folder)`` fills, built once per test run: the pytest-xdist workers of one run
    share it (the first to ask builds it under a lock while another that asks waits; a build that failed is done
    again by the next), instead of each building its own. Read only."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent   # the run's folder, above each worker's own
    folder, done = base / name, base / f"{name}.done"
    with open(base / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)   # released when the file closes
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            done.touch()
    return folder


def _repoint(db: Path, old: str, new: str) -> None:
    """Replace ``old`` by ``new`` in every text value of sqlite database ``db`` (paths and file URIs)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            for _, column, kind, *_ in conn.execute(f'PRAGMA table_info("{table}")').fetchall():
                if kind.upper().startswith(("VARCHAR", "TEXT", "CHAR")) or not kind:
                    conn.execute(f'UPDATE "{table}" SET "{column}" = replace("{column}", ?, ?) '
                                 f'WHERE typeof("{column}") = \'text\' AND instr("{column}", ?) > 0', [old, new, old])
        conn.commit()


def forget_mlflow() -> None:
    """Drop every MLflow client, store and database engine (with its pooled sqlite connections) this process holds,
    pmdb's cached clients included, as if it had never opened an MLflow store: the next command opens mlflow.db
    anew, as a new `pmdb` process does. For a test that replaced or deleted mlflow.db under this process (MLflow
    keeps its stores and engines per URI for the life of a process) and runs the next command in it."""
    import mlflow
    from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore as RegistryStore
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore as TrackingStore
    from mlflow.tracking._model_registry.utils import _get_store_registry
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    from fitters import registry

    assert mlflow.active_run() is None, "an MLflow run is still active in this process"
    for engines in (TrackingStore._engine_map, RegistryStore._engine_map):
        for engine in engines.values():
            engine.dispose()
        engines.clear()
    for stores in (_tracking_store_registry, _get_store_registry()):   # lru_cache of a method: on the class
        type(stores)._get_store_with_resolved_uri.cache_clear()
    registry._client.cache_clear()


def in_process(home: Path | str | None, *args: object) -> subprocess.CompletedProcess:
    """``pmdb [--home HOME] ARGS`` in this process: a CompletedProcess (returncode, stdout, stderr) as
    ``subprocess.run(..., capture_output=True, text=True)`` gives for the real command."""
    from pmdb.cli.main import main

    argv = ([] if home is None else ["--home", str(home)]) + [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return subprocess.CompletedProcess(["pmdb", *argv], code, out.getvalue(), err.getvalue())


def cli(home: Path | str | None, *args: object) -> tuple[int, str, str]:
    """:func:`in_process` as (exit code, stdout, stderr)."""
    done = in_process(home, *args)
    return done.returncode, done.stdout, done.stderr


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc): what a signal test checks is gone after its parent stopped."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    children.setdefault(int(fh.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_http(proc: subprocess.Popen, port: int, seconds: float) -> int | None:
    """The HTTP status of http://127.0.0.1:PORT/ once it answers, or None when ``proc`` ended or ``seconds`` passed.
    Polled every 0.2 s (a refused connection costs about a millisecond; `pmdb ui` answered after 14.6-16.0 s here
    at load 2.7-4.7, 2026-11-28: polled every second, the wait overran by up to a second)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                return response.status
        except OSError:
            time.sleep(0.2)
    return None


def load_benchmark(name: str):
    """The module of ``benchmarks/<name>.py`` (benchmarks are scripts, not a package), loaded afresh."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses resolve their string annotations through it
    spec.loader.exec_module(module)
    return module


# a 1-layer bert of the quickstart's kind, small enough to time every call of a step in a test
TINY_BERT = {"arch": "bert", "head": "auto", "heads": 2, "hidden": 32, "layers": 1, "lr": 1e-4, "overrides": {},
             "seq_len": 16}


def tiny_bert_trainer(bench: Any, steps: int = 3) -> tuple[Any, list[int]]:
    """``bench.trainer_of`` (the benchmarks' trainer of a stored run's config) for :data:`TINY_BERT` at batch 2,
    under pmdb's allocator settings as the benchmarks run: (trainer, the ids of its ``steps`` prepared steps)."""
    from collectors.workloads.allocator import apply_in_process

    apply_in_process()
    return bench.trainer_of("transformer", TINY_BERT, 2, steps)


SHARED_DATA = Path(__file__).resolve().parent.parent.parent / "shared" / "data"  # ../shared/data beside the project


def ingest_gpu_trace(store: Any, name: str, platform: str, *, et: bool = True, tmp_path_factory: Any = None) -> int:
    """The shared GPU trace folder ``traces/gpu/<name>`` (its Kineto trace, and its execution trace with ``et``)
    imported into ``store`` as a trace set of the imported cuda ``platform``; the trace set id. Skips when the
    folder is absent. With ``tmp_path_factory`` its files are parsed once per test run (:func:`parsed_gpu_trace`)
    and only stored here: what is stored is the same."""
    import pytest

    from collectors.traces.ingest import RankTraces, ingest_trace_set
    from pmdb import platform as platforms

    folder = SHARED_DATA / "traces" / "gpu" / name
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    if tmp_path_factory is not None:
        ranks = parsed_gpu_trace(tmp_path_factory, name, et=et)
    else:
        ranks = [RankTraces(0, folder / "kineto.json.gz", folder / "et.json.gz" if et else None)]
    platforms.ensure_named(store, platform, device_kind="cuda")
    with store.run("trace", platform, {}) as run:
        return ingest_trace_set(store, run.run_id, platform, ranks, label=name, source="imported")


def parsed_gpu_trace(tmp_path_factory: Any, name: str, *, et: bool = True) -> list:
    """The shared GPU trace folder ``traces/gpu/<name>`` read and parsed by the importer
    (:func:`collectors.traces.ingest.parse_ranks`, which :func:`~collectors.traces.ingest.ingest_trace_set` takes
    instead of the files), once per test run (:func:`built_once`; param_resnet's pair takes ~3 s of CPU, param_linear's
    ~1.1 s, loading the result ~0.8 and ~0.05 s): a fresh copy per call. Parsing itself is tested where a test imports
    the files (tests/collectors/traces)."""
    import pickle

    from collectors.traces.ingest import RankTraces, parse_ranks

    folder = SHARED_DATA / "traces" / "gpu" / name

    def build(out: Path) -> None:   # the importer keeps each file's bytes, not its decoded JSON: small to pickle
        parsed = parse_ranks([RankTraces(0, folder / "kineto.json.gz", folder / "et.json.gz" if et else None)])
        (out / "ranks.pickle").write_bytes(pickle.dumps(parsed, protocol=pickle.HIGHEST_PROTOCOL))
    built = built_once(tmp_path_factory, f"parsed_{name}" + ("" if et else "_kineto_only"), build)
    return pickle.loads((built / "ranks.pickle").read_bytes())


def store_before(ws: Any, count: int) -> Any:
    """An open DuckDB connection to a new store in workspace ``ws`` with only its first ``count`` migrations applied:
    what an older release wrote, for a migration test to fill before the current code opens it."""
    import duckdb

    from pmdb import migrator

    ws.create_dirs()
    conn = duckdb.connect(str(ws.db_path))
    migrator.migrate(conn, migrator.available()[:count])
    return conn
