"""A user's own training loop (conv2d, conv1d, an attention mixer, AdamW; 2 intra-op threads; plain torch.profiler
with an execution trace, no thread metadata) walked through the README's "Bringing your own trace" recipe: the
ops measured at two thread counts (the sweep at --threads 2, the trace's shapes at 1 because the trace does not
say) give a conv1d model that uses ``threads``, and `pmdb predict` prices it, before and after the set's threads
are given. The sweep and fits are narrowed to conv1d (`--op`) to keep the test short; every printed line of
`collect trace` and `predict` fits 80 columns."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store

LOOP = """
import time, torch
from torch import nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function

torch.set_num_threads(2)


class Mixer(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv2d = nn.Conv2d(3, 8, 3, padding=1)
        self.conv1d = nn.Conv1d(8, 16, 3, padding=1)
        self.attn = nn.MultiheadAttention(16, 2, batch_first=True)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        h = torch.relu(self.conv2d(x)).flatten(2)              # B, 8, 64
        h = self.conv1d(h).transpose(1, 2)                     # B, 64, 16
        h = h + self.attn(h, h, h, need_weights=False)[0]
        return self.head(h.mean(1))


model = Mixer()
opt = torch.optim.AdamW(model.parameters())
x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))


def step():
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


for _ in range(5):
    step()
start = time.perf_counter()
for _ in range(20):
    step()
print(f"--measured-ms {(time.perf_counter() - start) / 20 * 1e3:.3f}")
et = ExecutionTraceObserver().register_callback("et.json")
with profile(activities=[ProfilerActivity.CPU], record_shapes=True, execution_trace_observer=et) as prof:
    for n in range(1, 4):
        with record_function(f"ProfilerStep#{n}"):
            step()
prof.export_chrome_trace("kineto.json")
"""
CONV = ("--op", "conv1d")  # the op whose model came to use threads


@pytest.fixture(scope="module")
def loop(tmp_path_factory) -> tuple[Path, Path, float]:
    """(kineto.json, et.json, the unprofiled step time in ms) of the loop, recorded in a child process."""
    out = tmp_path_factory.mktemp("own_loop")
    done = subprocess.run([sys.executable, "-c", LOOP], cwd=out, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return out / "kineto.json", out / "et.json", float(re.search(r"--measured-ms ([0-9.]+)", done.stdout).group(1))


def _pmdb(home: Path, capsys, *args: object) -> list[str]:
    """Run a command (must succeed) and return its printed lines, stdout then stderr."""
    code = main(["--home", str(home), *map(str, args)])
    out = capsys.readouterr()
    assert code == 0, out.err[-2000:]
    return out.out.splitlines() + out.err.splitlines()


def _narrow(lines: list[str]) -> list[str]:
    """Lines wider than 80 columns (a lone word, such as a long path, is never broken)."""
    return [line for line in lines if len(line) > 80 and len(line.split()) > 1]


@pytest.mark.slow  # ~30 s of CPU: a profiled loop, a sweep, an MLflow fit, two predictions
def test_own_loop_recipe_prices_conv1d_with_its_threads(fit_workspace: Workspace, loop, capsys, monkeypatch):
    """The empty MLflow store the fit uses is a copy of one made once per test run (its creation is tested in
    tests/faults)."""
    workspace = fit_workspace
    monkeypatch.setenv("COLUMNS", "80")
    kineto, et, measured = loop
    home = workspace.home
    lines = _pmdb(home, capsys, "collect", "trace", "--kineto", kineto, "--et", et, "--measured-ms", measured,
                  "--workload", "my-loop")
    assert not _narrow(lines), _narrow(lines)
    _pmdb(home, capsys, "collect", "ops", "--sweep", "quick", "--threads", 2, *CONV, "--no-progress",
          "--no-peaks")
    _pmdb(home, capsys, "collect", "ops", "--from-trace-set", 1, *CONV, "--no-progress", "--no-peaks")
    with Store.open(workspace, read_only=True) as store:
        threads = store.conn.execute("SELECT DISTINCT threads FROM op_measurements WHERE op = 'conv1d' "
                                     "ORDER BY threads").fetchall()
    assert threads == [(1,), (2,)]  # the trace's shapes at 1 thread (it does not say), the sweep at 2
    _pmdb(home, capsys, "fit", *CONV, "--family", "gbdt", "--budget-minutes", 0.5)
    _pmdb(home, capsys, "fit", "overheads", "--include-joint")
    predicted = []
    for given in (None, 2):
        if given is not None:
            _pmdb(home, capsys, "collect", "trace", "--trace-set", 1, "--threads", given)
        lines = _pmdb(home, capsys, "predict", "--trace-set", 1, "--kernels", "models")
        assert not _narrow(lines), _narrow(lines)
        with Store.open(workspace, read_only=True) as store:
            used = store.conn.execute(
                "SELECT m.name FROM prediction_models m WHERE m.prediction_id = (SELECT max(prediction_id) "
                "FROM predictions)").fetchall()
            predicted.append(store.scalar("SELECT predicted_us FROM predictions ORDER BY prediction_id DESC "
                                          "LIMIT 1"))
        assert any(name.startswith("conv1d.fwd") for (name,) in used), used  # the threads model priced it
    assert all(p > 0 for p in predicted)
