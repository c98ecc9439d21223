"""A trace that names no host goes to the platform of the GPU its deviceProperties name (as `pmdb platform-specs`
names it), decided from the file's header before its events are parsed; an unregistered GPU is refused at once."""
from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from collectors.traces.files import read_top_level
from collectors.traces.import_set import TraceImport, import_traces
from collectors.traces.ingest import RankTraces
from collectors.traces.kineto import read_header
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.errors import PmdbError
from pmdb.store import Store


def _pmdb(home: Path, *args: object) -> int:
    return main(["--home", str(home), *map(str, args)])


def _rows(workspace: Workspace, sql: str) -> list[tuple]:
    with Store.open(workspace, read_only=True) as store:
        return store.conn.execute(sql).fetchall()


def _errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("pmdb: error:")]


def _folder(shared: Path, name: str) -> Path:
    folder = shared / "traces" / "gpu" / name
    if not folder.is_dir():
        pytest.skip(f"{folder} not present")
    return folder


def test_the_header_names_host_gpu_and_the_members_after_the_events(shared_data):
    h200 = read_header(str(_folder(shared_data, "h200_gpt2_large") / "kineto.json.gz"))
    assert (h200.host, h200.devices, h200.gpu_names) == (None, 1, ("NVIDIA H200",))
    # hta_simple_add writes distributedInfo after traceEvents; its 8 GPUs are one model
    path = _folder(shared_data, "hta_simple_add") / "kineto.json.gz"
    add = read_header(str(path))
    assert add.devices > 1 and add.gpu_names == ("NVIDIA A100-PG509-200",)
    assert {"distributedInfo", "traceName", "deviceProperties"} <= set(read_top_level(path, "traceEvents"))


def test_an_unregistered_gpu_is_refused_from_the_header_naming_it(workspace, shared_data, capsys):
    folder = _folder(shared_data, "h200_gpt2_large")
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", folder / "kineto.json.gz",
                 "--et", folder / "et.json.gz") == 2
    (line,) = _errors(capsys)
    assert "no 'host_name'" in line and "'NVIDIA H200'" in line
    assert "pmdb platform-specs" in line and "--from-trace" in line and "nvidia-h200" in line
    assert _rows(workspace, "SELECT count(*) FROM platforms") == [(0,)]
    # parsing the events of this pair takes ~9 s here; reading the Kineto header, a fraction of a second
    request = TraceImport([RankTraces(0, folder / "kineto.json.gz", folder / "et.json.gz")])
    with Store.open(workspace) as store:
        started = time.perf_counter()
        with pytest.raises(PmdbError, match="NVIDIA H200"):
            import_traces(store, request)
        seconds = time.perf_counter() - started
    assert seconds < 3.0, f"the refusal took {seconds:.1f} s: the events were parsed (the header suffices)"


def test_a_registered_sheet_receives_the_trace_and_its_et_and_platform_still_wins(workspace, shared_data, capsys):
    folder = _folder(shared_data, "hta_simple_add")
    kineto, et = folder / "kineto.json.gz", folder / "et.json.gz"
    # the command the refusal names, then the same import without --platform
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--et", et) == 2
    assert "--from-trace" in _errors(capsys)[0]
    assert _pmdb(workspace.home, "platform-specs", "--from-trace", kineto) == 0
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", kineto, "--et", et) == 0
    assert "on platform nvidia-a100-pg509-200 (imported)" in capsys.readouterr().out
    assert _rows(workspace, "SELECT t.kind, s.platform FROM traces t JOIN trace_sets s USING (trace_set_id) "
                            "ORDER BY t.kind") == [("et", "nvidia-a100-pg509-200"),
                                                   ("kineto", "nvidia-a100-pg509-200")]
    # --platform wins over the GPU's platform (a copy of the file: the same content is imported once)
    copy = workspace.home / "copy.json"
    copy.write_bytes(gzip.decompress(kineto.read_bytes()).replace(b'"traceEvents"', b'"traceEvents" ', 1))
    assert _pmdb(workspace.home, "collect", "trace", "--kineto", copy, "--platform", "my-a100") == 0
    assert _rows(workspace, "SELECT platform FROM trace_sets ORDER BY trace_set_id") == [
        ("nvidia-a100-pg509-200",), ("my-a100",)]


def test_the_h200_sheet_is_found_by_the_name_platform_specs_gives(workspace, shared_data):
    """The plan needs only the header: the H200 trace goes to the sheet `platform-specs` registered."""
    from collectors.traces.origin import plan_platform

    sheet = shared_data / "gpu_kernels" / "device_configs_extra" / "NVIDIA_H200.json"
    folder = _folder(shared_data, "h200_gpt2_large")
    if not sheet.is_file():
        pytest.skip(f"{sheet} not present")
    assert _pmdb(workspace.home, "platform-specs", sheet) == 0
    path = str(folder / "kineto.json.gz")
    with Store.open(workspace) as store:
        plan = plan_platform(store, None, [(path, read_header(path))], None)
        assert (plan.action, plan.name, plan.local) == ("existing", "nvidia-h200", False)
        given = plan_platform(store, "elsewhere", [(path, read_header(path))], None)
        assert (given.action, given.name) == ("imported", "elsewhere")
