"""pmdb's CUDA path end to end on a real GPU, with the README's commands in one workspace, in order: kernel
microbenchmarks (device time beside single-call and back-to-back), a small gpt2 measured and traced on CUDA (Kineto +
ET), a CUDA loop recorded outside pmdb and imported, GPU kernels mined from the traces, replay, the traced shapes
microbenchmarked, fit, overheads and model mode. Skipped without a CUDA device (conftest.py)."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from collectors.ops.cuda_timing import KERNELS, time_device
from collectors.ops.timer import TimerSettings
from pmdb.config import Workspace
from pmdb.store import Store

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "COLUMNS": "100"}


def pmdb(home: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), *args], capture_output=True,
                          text=True, timeout=timeout, env=ENV)
    assert done.returncode == 0, f"pmdb {' '.join(args)}: exit {done.returncode}\n{done.stdout[-2000:]}\n" \
                                 f"{done.stderr[-3000:]}"
    return done


def query(home: Path, sql: str, args: list | None = None):
    with Store.open(Workspace(home), read_only=True) as store:
        return store.query(sql, args or [])


@pytest.fixture(scope="module")
def home(tmp_path_factory, cuda_visible) -> Path:
    """A workspace with this GPU machine registered."""
    ws = tmp_path_factory.mktemp("gpu") / "ws"
    pmdb(ws, "init")
    pmdb(ws, "platform")
    return ws


def _platform(home: Path) -> str:
    frame = query(home, "SELECT name FROM platforms WHERE device_kind = 'cuda' AND NOT is_imported")
    assert len(frame) == 1, frame
    return frame["name"].iloc[0]


def test_time_device_separates_the_kernel_from_the_launch_path(cuda_visible):
    """A 1M-element add (the H200 file: 23.8 µs single call, 11.8 back to back): the profiler's kernel time is
    below both, and back to back is not slower than one call."""
    a = torch.randn(2 ** 20, device=cuda_visible)
    b = torch.randn(2 ** 20, device=cuda_visible)
    timed = time_device(lambda: a.add(b), TimerSettings(), cuda_visible)
    assert timed.kernels.median_us > 0
    assert timed.kernels.median_us < timed.single_call.median_us
    assert timed.back_to_back_us <= 1.1 * timed.single_call.median_us
    assert timed.kernels.median_us <= 1.1 * timed.back_to_back_us
    assert timed.kernels.repetitions == timed.calls >= 5


def test_collect_ops_on_cuda_stores_device_time(home):
    pmdb(home, "collect", "ops", "--sweep", "quick", "--op", "relu", "--op", "add", "--op", "fully_connected",
         "--max-configs", "4", "--no-progress")
    rows = query(home, "SELECT op, pass, params, median_us, single_call_us, back_to_back_us, device_timing, "
                       "cache_state, device FROM v_op_measurements WHERE platform = ? AND source = 'microbenchmark'",
                 [_platform(home)])
    assert len(rows) >= 3 * 4
    assert set(rows["device_timing"]) == {KERNELS} and set(rows["cache_state"]) == {"device"}
    assert rows["device"].str.startswith("cuda").all()
    assert (rows["median_us"] > 0).all() and (rows["single_call_us"] > 0).all() and (rows["back_to_back_us"] > 0).all()
    # the smallest configs of an element-wise op are all launch path in one call: their device time is well below
    ratio = (rows["median_us"] / rows["single_call_us"]).groupby(rows["op"]).min()
    assert (ratio[["relu", "add"]] < 0.8).all(), ratio


def test_collect_workload_transformer_on_cuda_with_kineto_and_et(home):
    pmdb(home, "collect", "workload", "transformer", "--arch", "gpt2", "--layers", "2", "--hidden", "128",
         "--heads", "2", "--seq-len", "64", "--batch-size", "4", "--iters", "10", "--warmup", "3")
    platform = _platform(home)
    truth = query(home, "SELECT r.measured_us FROM workload_runs r JOIN completed_runs c USING (run_id) "
                        "WHERE c.platform = ?", [platform])
    assert len(truth) >= 1 and (truth["measured_us"] > 0).all()
    kinds = query(home, "SELECT t.kind, count(*) AS n FROM traces t JOIN trace_sets s USING (trace_set_id) "
                        "WHERE s.platform = ? AND s.source = 'captured' GROUP BY t.kind", [platform])
    assert set(kinds["kind"]) == {"kineto", "et"}, kinds
    kernels = query(home, "SELECT count(*) AS n FROM trace_kernels k JOIN traces t USING (trace_id) "
                          "JOIN trace_sets s USING (trace_set_id) WHERE s.platform = ?", [platform])
    assert kernels["n"].iloc[0] > 0, "the CUDA Kineto pass recorded no GPU kernels"


def test_import_a_cuda_trace_recorded_outside_pmdb(home, tmp_path):
    recorded = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu_own_trace.py"), "--device", "cuda",
                               "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, env=ENV)
    assert recorded.returncode == 0, recorded.stderr
    measured = re.search(r"--measured-ms ([0-9.]+)", recorded.stdout).group(1)
    pmdb(home, "collect", "trace", "--kineto", str(tmp_path / "kineto.json"), "--et", str(tmp_path / "et.json"),
         "--measured-ms", measured, "--workload", "own-cuda-loop")
    sets = query(home, "SELECT platform, given_measured_us FROM trace_sets WHERE source = 'imported'")
    assert len(sets) == 1 and sets["platform"].iloc[0] == _platform(home)  # this machine's trace: its platform
    assert sets["given_measured_us"].iloc[0] == pytest.approx(float(measured) * 1e3)


def test_mine_gpu_kernels_of_the_traces(home):
    pmdb(home, "collect", "mine-traces", "--all")
    mined = query(home, "SELECT op, count(*) AS n, min(median_us) AS fastest FROM v_op_measurements "
                        "WHERE platform = ? AND source = 'trace' GROUP BY op", [_platform(home)])
    assert len(mined) >= 3 and (mined["fastest"] > 0).all(), mined


def test_replay_reproduces_the_profiled_steps(home):
    pmdb(home, "predict", "--all", "--mode", "replay")
    replay = query(home, "SELECT trace_set_id, rel_error FROM v_prediction_errors WHERE mode = 'replay' AND "
                         "platform = ?", [_platform(home)])
    assert len(replay) >= 2, replay
    assert all(math.isfinite(e) and abs(e) < 0.5 for e in replay["rel_error"]), replay


def test_fit_and_model_mode(home):
    pytest.importorskip("mlflow", reason="the fit registers in MLflow, which is not installed here")
    pmdb(home, "collect", "ops", "--from-traces", "--no-progress", "--no-peaks")
    pmdb(home, "fit", "--all", "--budget-minutes", "0.5", "--no-progress", "--summary")
    pmdb(home, "fit", "overheads")
    pmdb(home, "predict", "--all", "--mode", "model")
    model = query(home, "SELECT trace_set_id, rel_error FROM v_prediction_errors WHERE mode = 'model' AND "
                        "platform = ?", [_platform(home)])
    assert len(model) >= 2, model
    assert all(math.isfinite(e) and abs(e) < 1.0 for e in model["rel_error"]), model
