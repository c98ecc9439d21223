"""One's own training loop, recorded outside pmdb with torch.profiler + ExecutionTraceObserver (2 intra-op threads),
imported the way the README's "Bringing your own trace" says: the README's recording snippet is run as written, in
a child process, and the commands after it are run on what it recorded."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pmdb import platform
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store

README = Path(__file__).resolve().parents[3] / "README.md"


def _snippet() -> str:
    """The Python block of the README's "Bringing your own trace" section."""
    section = README.read_text().split("## Bringing your own trace", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def own_trace(tmp_path_factory) -> tuple[Path, Path, float]:
    """(kineto.json, et.json, the printed unprofiled step time in ms) of the README's snippet."""
    out = tmp_path_factory.mktemp("own_loop")
    done = subprocess.run([sys.executable, "-c", _snippet()], cwd=out, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = float(re.search(r"--measured-ms ([0-9.]+)", done.stdout).group(1))
    return out / "kineto.json", out / "et.json", measured


def _pmdb(home: Path, *args: object) -> int:
    return main(["--home", str(home), *map(str, args)])


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("pmdb: error:")]


def _changed(kineto: Path, tmp_path: Path, name: str, **fields: object) -> Path:
    """A copy of the Kineto trace with top-level fields changed (None: removed)."""
    doc = json.loads(kineto.read_text())
    for key, value in fields.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def _rows(workspace: Workspace, sql: str) -> list[tuple]:
    with Store.open(workspace, read_only=True) as store:
        return store.conn.execute(sql).fetchall()


def _this_machine() -> dict:
    row = platform.detect()
    return {"name": platform.default_name(row), "fingerprint": platform.fingerprint(row)}


def test_a_trace_of_this_machine_needs_no_platform(workspace, own_trace, capsys):
    kineto, et, measured = own_trace
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--et", et, "--measured-ms", measured) == 0
    out = capsys.readouterr().out
    here = _this_machine()
    assert f"on platform {here['name']} (this machine)" in out and "2 intra-op thread(s)" in out
    (name, imported, fingerprint), = _rows(workspace, "SELECT name, is_imported, fingerprint FROM platforms")
    assert (name, imported, fingerprint) == (here["name"], False, here["fingerprint"])
    (threads, given, profiled, source), = _rows(workspace, "SELECT threads, given_measured_us, measured_us, source "
                                                           "FROM v_trace_sets")
    assert threads == 2 and given == pytest.approx(measured * 1000) and profiled > 0 and source == "imported"
    # recorded together with the ET (same process, linked by record-function id): overheads leave it out
    assert {r[0] for r in _rows(workspace, "SELECT profiled_with FROM traces")} == {"kineto+et"}
    with Store.open(workspace) as store:  # what every later `collect ops` does: the same platform, no clash
        assert platform.register_local(store)["name"] == here["name"]


def test_this_machines_name_is_never_taken_by_another_machines_trace(workspace, own_trace, tmp_path, capsys):
    kineto, et, _ = own_trace
    here = _this_machine()["name"]
    other = _changed(kineto, tmp_path, "other.json", host_name="another-host")
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", other, "--platform", here) == 2
    (line,) = _errors(capsys)
    assert f"--platform {here} is this machine's name" in line and "another-host" in line
    assert _rows(workspace, "SELECT count(*) FROM platforms") == [(0,)]
    # this machine's name for a trace of this machine registers this machine, not an imported platform
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--platform", here) == 0
    assert _rows(workspace, "SELECT name, is_imported FROM platforms") == [(here, False)]


def test_a_trace_of_another_machine_asks_for_its_platform(workspace, own_trace, tmp_path, capsys):
    kineto, et, _ = own_trace
    other = _changed(kineto, tmp_path, "other.json", host_name="another-host")
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", other) == 2
    (line,) = _errors(capsys)
    assert "recorded on host 'another-host'" in line and "give --platform NAME" in line
    assert _pmdb(workspace.home, "collect", "trace", "--et", et) == 2
    (line,) = _errors(capsys)
    assert "an execution trace alone" in line and "give --platform NAME" in line
    assert _rows(workspace, "SELECT count(*) FROM platforms") == [(0,)]  # refusals register nothing
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", other, "--platform", "other-box") == 0
    assert _rows(workspace, "SELECT name, is_imported, device_kind FROM platforms") == [("other-box", True, "cpu")]


def test_a_new_name_for_this_machine_registered_under_another_is_refused(workspace, own_trace, capsys):
    kineto, et, _ = own_trace
    assert _pmdb(workspace.home, "platform", "--name", "mybox") == 0
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--platform", "newbox") == 2
    (line,) = _errors(capsys)
    assert "registered as 'mybox'" in line
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--et", et) == 0
    assert _rows(workspace, "SELECT platform FROM v_trace_sets") == [("mybox",)]


def test_threads_from_the_trace_from_the_option_or_set_later(workspace, own_trace, tmp_path, capsys):
    kineto, _, _ = own_trace
    bare = _changed(kineto, tmp_path, "bare.json", intra_op_threads=None)
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", bare) == 0
    err = capsys.readouterr().err
    assert "do not record their intra-op thread count" in err and "--measured-ms" in err
    assert _rows(workspace, "SELECT threads, given_measured_us FROM trace_sets") == [(None, None)]
    assert _pmdb(workspace.home, "collect", "trace", "--trace-set", 1, "--threads", 3, "--measured-ms", 4.5) == 0
    assert _rows(workspace, "SELECT threads, given_measured_us FROM trace_sets") == [(3, 4500.0)]
    # the trace says 2: a --threads that disagrees is refused, one that agrees is fine
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--threads", 3) == 2
    (line,) = _errors(capsys)
    assert "records 2 intra-op thread(s)" in line and "--threads says 3" in line
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", bare, "--threads", 0) == 2
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--measured-ms", -1) == 2
    assert _rows(workspace, "SELECT count(*) FROM trace_sets") == [(1,)]


def test_ranks_added_to_a_set_keep_its_platform_and_threads(workspace, own_trace, tmp_path, capsys):
    kineto, _, _ = own_trace
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto) == 0
    second = _changed(kineto, tmp_path, "rank1.json", trace_id="another-recording")
    assert _pmdb(workspace.home, "collect", "trace", "--trace-set", 1, "--rank", 1, "--kineto", second) == 0
    assert _rows(workspace, "SELECT world_size, threads FROM v_trace_sets") == [(2, 2)]
    assert _rows(workspace, "SELECT count(*) FROM v_traces") == [(2,)]
    third = _changed(kineto, tmp_path, "rank2.json", trace_id="a-third", intra_op_threads="4")
    assert _pmdb(workspace.home, "collect", "trace", "--trace-set", 1, "--rank", 2, "--kineto", third) == 2
    (line,) = _errors(capsys)
    assert "recorded with 2 intra-op thread(s), the new ranks with 4" in line


def _measured_threads(workspace: Workspace, run_id: str) -> set[int]:
    return {r[0] for r in _rows(workspace, f"SELECT DISTINCT threads FROM op_measurements WHERE run_id = '{run_id}'")}


def _last_run(workspace: Workspace, kind: str) -> str:
    return _rows(workspace, f"SELECT run_id FROM collection_runs WHERE kind = '{kind}' ORDER BY started_at DESC "
                            "LIMIT 1")[0][0]


@pytest.mark.slow
def test_readme_walkthrough_judges_against_the_given_time_and_warns_on_thread_counts(tmp_path, own_trace, capsys,
                                                                                     mlflow_template):
    """The README's commands (sweep narrowed to one op, roofline models only: the test stays short); then the same
    trace predicted with kernel models measured at 1 thread warns once about threads. The MLflow store the first
    fit would create is a copy of one made once per test run (its creation is tested in tests/faults)."""
    kineto, et, measured = own_trace
    ws, ones = Workspace(tmp_path / "ws"), Workspace(tmp_path / "ones")
    assert _pmdb(ws.home, "init") == 0
    shutil.copy(mlflow_template.mlflow_db, ws.mlflow_db)   # copied to `ones` with the rest below
    assert _pmdb(ws.home, "collect", "trace", "--kineto", kineto, "--et", et, "--measured-ms", measured,
                 "--workload", "my-loop") == 0
    shutil.copytree(ws.home, ones.home)  # the same import, for the 1-thread models below
    assert _pmdb(ws.home, "collect", "ops", "--sweep", "quick", "--threads", 2, "--op", "fully_connected",
                 "--no-progress") == 0
    assert _pmdb(ws.home, "collect", "ops", "--from-trace-set", 1, "--no-progress") == 0
    assert "measuring with 2 intra-op thread(s): trace set 1 ran with them" in capsys.readouterr().out
    assert _measured_threads(ws, _last_run(ws, "ops")) == {2}
    assert _pmdb(ws.home, "fit", "--all", "--family", "roofline", "--no-progress") == 0
    assert _pmdb(ws.home, "fit", "overheads", "--include-joint") == 0
    capsys.readouterr()
    assert _pmdb(ws.home, "predict", "--trace-set", 1) == 0
    err = capsys.readouterr().err
    assert f"truth: measured {measured:.1f} ms (given at import)" in err
    assert "intra-op thread" not in err  # models measured as the trace ran
    (truth,), = _rows(ws, "SELECT measured_us FROM v_predictions")
    assert truth == pytest.approx(measured * 1000)

    assert _pmdb(ones.home, "collect", "ops", "--sweep", "quick", "--op", "fully_connected", "--no-progress") == 0
    assert _measured_threads(ones, _last_run(ones, "ops")) == {1}
    assert _pmdb(ones.home, "fit", "--all", "--family", "roofline", "--no-progress") == 0
    capsys.readouterr()
    assert _pmdb(ones.home, "predict", "--trace-set", 1) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pmdb: warning:")]
    warnings = [line for line in lines if "intra-op thread" in line]
    assert len(warnings) == 1 and "trace set 1 was recorded with 2 intra-op threads" in warnings[0]
    assert "at 1 thread" in warnings[0]
    # the other warning this prediction may give: only fully_connected has a model here, so about half the work
    # keeps its traced time; whether that is over the limit depends on the host's 1-thread GEMM speed
    (share,), = _rows(ones, "SELECT self_priced_share FROM v_predictions")
    others = [line for line in lines if line not in warnings]
    assert len(others) == (share > 0.5) and all("kept its traced time" in line for line in others)
