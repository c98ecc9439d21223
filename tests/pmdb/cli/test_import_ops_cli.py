"""`pmdb collect import-ops`, `pmdb platform-specs` and `pmdb platform --list` as a user runs them (in-process
`main([...])`, real store, slices of the real NeuSight tables and sheets in ../shared/data)."""
from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store

V100 = "Tesla_V100-PCIE-32GB"


def real_slice(shared: Path, gpu: str, op: str, out: Path, rows: int = 50) -> Path:
    lines = gzip.decompress((shared / "gpu_kernels" / "neusight" / gpu / f"{op}.csv.gz").read_bytes()) \
        .decode().splitlines(keepends=True)[:rows + 1]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{op}.csv.gz"
    path.write_bytes(gzip.compress("".join(lines).encode()))
    return path


@pytest.fixture
def home(workspace: Workspace) -> Path:
    return workspace.home


def run(capsys, home: Path, *args: str) -> tuple[int, str, str]:
    code = main(["--home", str(home), *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(result: tuple[int, str, str], pattern: str) -> None:
    code, _, err = result
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and re.search(pattern, lines[0]), err
    assert lines[0].startswith("pmdb: error: "), err


def counts(home: Path) -> dict[str, int]:
    with Store.open(Workspace(home), read_only=True) as store:
        return {t: store.scalar(f"SELECT count(*) FROM {t}")
                for t in ("platforms", "collection_runs", "imported_files", "op_measurements")}


def test_import_a_folder_then_again(capsys, home, shared_data, tmp_path):
    folder = tmp_path / "v100"
    for op in ("linear", "conv", "softmax"):
        real_slice(shared_data, V100, op, folder)
    code, out, _ = run(capsys, home, "collect", "import-ops", folder, "--format", "neusight",
                       "--platform", "tesla-v100-pcie-32gb")
    assert code == 0
    assert re.search(r"^imported .*conv.csv.gz: 50 rows \(conv2d\)$", out, re.M)
    assert re.search(r"^imported .*linear.csv.gz: 50 rows \(fully_connected\)$", out, re.M)
    assert re.search(r"^run \w+: 150 rows on platform tesla-v100-pcie-32gb$", out, re.M)
    code, out, _ = run(capsys, home, "collect", "import-ops", folder / "linear.csv.gz", "--format", "neusight",
                       "--platform", "tesla-v100-pcie-32gb")
    assert code == 0 and "skipped" in out and "already imported" in out and "nothing new" in out
    assert counts(home) == {"platforms": 1, "collection_runs": 1, "imported_files": 3, "op_measurements": 150}


def test_a_bad_line_exits_2_and_stores_nothing(capsys, home, shared_data, tmp_path):
    good = real_slice(shared_data, V100, "gelu", tmp_path / "good")
    bad = real_slice(shared_data, V100, "bmm", tmp_path / "bad")
    lines = gzip.decompress(bad.read_bytes()).decode().splitlines(keepends=True)
    lines[24] = re.sub(r"^bmm,[^,]+,", "bmm,0.0x41,", lines[24])
    bad.write_bytes(gzip.compress("".join(lines).encode()))
    one_line_error(run(capsys, home, "collect", "import-ops", good, bad, "--format", "neusight", "--platform", "v"),
                   rf"^pmdb: error: {re.escape(str(bad))}:25: Latency is '0.0x41', not a number$")
    assert counts(home) == {"platforms": 0, "collection_runs": 0, "imported_files": 0, "op_measurements": 0}


@pytest.mark.parametrize("args, pattern", [
    (["--format", "csv", "--platform", "p"], r"bad --format 'csv': use neusight or generic"),
    (["--platform", "p"], r"give --format \(neusight or generic\)"),
    (["--format", "neusight"], r"give --platform NAME"),
    (["--format", "neusight", "--platform", "a/b"], r"bad platform name 'a/b'"),
    (["--format", "neusight", "--platform", "p", "--device-kind", "tpu"], r"bad --device-kind 'tpu'"),
    (["--format", "neusight", "--platform", "p", "--device-kind", "cpu"], r"NeuSight tables are GPU timings"),
    (["--format", "neusight", "--platform", "p", "MISSING"], r"no such file: .*missing.csv"),
])
def test_arguments_are_checked_before_any_run(capsys, home, shared_data, tmp_path, args, pattern):
    path = real_slice(shared_data, V100, "relu", tmp_path)
    files = [str(tmp_path / "missing.csv") if a == "MISSING" else a for a in args]
    if "MISSING" not in args:
        files.append(str(path))
    one_line_error(run(capsys, home, "collect", "import-ops", *files), pattern)
    assert counts(home)["collection_runs"] == 0 and counts(home)["platforms"] == 0


def test_no_files_two_devices_and_this_machine(capsys, home, shared_data, tmp_path):
    one_line_error(run(capsys, home, "collect", "import-ops", "--format", "neusight", "--platform", "p"),
                   r"give the files")
    v100 = real_slice(shared_data, V100, "tanh", tmp_path / "v100")
    t4 = real_slice(shared_data, "Tesla_T4", "tanh", tmp_path / "t4")
    one_line_error(run(capsys, home, "collect", "import-ops", v100, t4, "--format", "neusight", "--platform", "p"),
                   r"several GPUs \(Tesla T4, Tesla V100-PCIE-32GB\)")
    code, out, _ = run(capsys, home, "platform")
    here = re.search(r"platform (\S+) \(fingerprint", out).group(1)
    one_line_error(run(capsys, home, "collect", "import-ops", v100, "--format", "neusight", "--platform", here),
                   rf"platform '{re.escape(here)}' is this machine")
    assert counts(home) == {"platforms": 1, "collection_runs": 0, "imported_files": 0, "op_measurements": 0}


def test_generic_file_through_the_cli(capsys, home, tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text("op,M,N,K,time_ms,device\nlinear,64,128,256,0.0125,NVIDIA L4\n")
    code, out, _ = run(capsys, home, "collect", "import-ops", path, "--format", "generic", "--platform", "nvidia-l4")
    assert code == 0 and "1 rows (fully_connected)" in out
    path.write_text("M,N,time_ms\n1,2,3\n")
    one_line_error(run(capsys, home, "collect", "import-ops", path, "--format", "generic", "--platform", "nvidia-l4"),
                   r"mine.csv:1: no 'op' column")


def test_every_option_has_help(capsys):
    import typer

    from pmdb.cli.main import app
    root = typer.main.get_command(app)
    for path in (["collect", "import-ops"], ["platform-specs"], ["platform"]):
        command = root
        for name in path:
            command = command.commands[name]
        assert (command.help or "").strip(), path
        assert main([*path, "--help"]) == 0
        out = capsys.readouterr().out
        for param in command.params:
            assert len((getattr(param, "help", None) or "").strip()) > 20, (path, param.name)
            assert any(opt in out for opt in getattr(param, "opts", [])) or param.name.upper() in out, (path, param)


def test_platform_specs_list_and_errors(capsys, home, shared_data, tmp_path):
    sheets = shared_data / "gpu_kernels" / "neusight" / "device_configs"
    code, out, _ = run(capsys, home, "platform-specs", sheets)
    assert code == 0 and len(re.findall(r"^platform \S+: ", out, re.M)) == 9
    for command in (["platform", "--list"], ["platform-specs", "--list"]):
        code, out, _ = run(capsys, home, *command)
        lines = out.splitlines()
        assert code == 0 and len(lines) == 10 and max(map(len, lines)) <= 80, out
        assert re.search(r"^\s*tesla-v100-pcie-32gb\s+cuda\s+Tesla V100-PCIE-32GB\s+14.03\s+900\s+80\s+1370\s+6\s+32$",
                         out, re.M), out
    trace = shared_data / "traces" / "gpu" / "hta_a100_16rank_rank0" / "kineto.json.gz"
    code, out, _ = run(capsys, home, "platform-specs", "--from-trace", trace)
    assert code == 0 and re.search(r"^\s*nvidia-a100-sxm4-80gb\s+cuda\s+NVIDIA A100-SXM4-80GB\s+-\s+-\s+108\s+-\s+-"
                                   r"\s+79$", out, re.M), out
    code, out, _ = run(capsys, home, "platform-specs", "--from-trace", trace, "--name", "nvidia-a100-sxm4-40gb")
    assert code == 0 and re.search(r"nvidia-a100-sxm4-40gb\s+cuda\s+NVIDIA A100-SXM4-40GB\s+19.49\s+1555\s+108"
                                   r"\s+1410\s+40\s+40$", out, re.M), out
    before = counts(home)
    bad = tmp_path / "bad.json"
    bad.write_text('{"Device": "X", "Mem_Bw": 100}')
    one_line_error(run(capsys, home, "platform-specs", sheets / "Tesla_T4.json", bad),
                   r"bad.json: the spec sheet lacks SingleFLOPs")
    bad.write_text("not json")
    one_line_error(run(capsys, home, "platform-specs", bad), r"bad.json:1: not a JSON spec sheet")
    one_line_error(run(capsys, home, "platform-specs", sheets, "--name", "one"), r"--name names one platform")
    one_line_error(run(capsys, home, "platform-specs"), r"give spec-sheet files")
    one_line_error(run(capsys, home, "platform-specs", tmp_path / "none.json"), r"no such file")
    assert counts(home) == before
