"""Bad input is refused, through the real CLI on a real workspace: exit 2, one line on stderr, no traceback, and
nothing stored — the row count of every table (platforms and collection_runs included) is unchanged.

Covers tables cut short while written (a last row cut inside its last field), negative / NaN / infinite numbers,
unknown platforms (the same one-line error everywhere; none is created on the way) and mistyped ids and paths
(refused before a run row is made, never stored as a failed run)."""
from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import duckdb
import pytest

from harness import cli

DATA = Path(__file__).resolve().parent.parent / "collectors" / "importers" / "data"
NCCL_HEADER = "size(B),count,type,time(ns),busbw(GB/s),time(ns),busbw(GB/s)\n"
NCCL_ROWS = ["1048576,262144,float,44210,23.72,45100,23.25", "2097152,524288,float,53430,39.25,51130,41.01",
             "3145728,786432,float,56270,55.90,54160,58.08"]
GENERIC_HEADER = "op,M,N,K,time_us\n"
NEUSIGHT_HEADER = "OPName,Latency,Device,B,H\n"
TINY_GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128, "n_positions": 32,
             "bos_token_id": 0, "eos_token_id": 0}
UNKNOWN = r"unknown platform 'typo' \(known: [^;]+; register one with `pmdb platform --name NAME`"


def counts(home: Path) -> dict[str, int]:
    """Rows of every table of the store, read directly (no pmdb code in between)."""
    with duckdb.connect(str(home / "pmdb.duckdb"), read_only=True) as conn:
        tables = [t for (t,) in conn.execute("SELECT table_name FROM duckdb_tables() WHERE NOT internal").fetchall()]
        return {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    """A workspace with this machine registered (`pmdb init`, `pmdb platform`)."""
    ws = tmp_path_factory.mktemp("bad_inputs") / "ws"
    for args in (["init"], ["platform"]):
        code, _, err = cli(ws, *args)
        assert code == 0, err
    return ws


def refused(home: Path, pattern: str, *args: object) -> str:
    """Run a command that must be refused: exit 2, one line matching ``pattern``, every table unchanged."""
    before = counts(home)
    code, _, err = cli(home, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("pmdb: error: "), err
    assert re.search(pattern, lines[0]), lines[0]
    assert counts(home) == before, f"{args} stored rows although refused"
    return lines[0]


def write(folder: Path, name: str, text: str) -> Path:
    """``text`` as the file ``folder/name`` (gzipped when the name ends in .gz), byte for byte."""
    path = folder / name
    path.write_bytes(gzip.compress(text.encode()) if name.endswith(".gz") else text.encode())
    return path


# ---- tables cut short while written ---------------------------------------------------------------------------
def _nccl_stdout_cut() -> str:
    """The recorded nccl-tests stdout cut inside its last result row."""
    lines = (DATA / "nccl_tests_all_reduce_perf_2gpu.txt").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if re.match(r"\s+\d", line))
    return "\n".join(lines[:last] + [lines[last][:lines[last].rindex(".") + 1]])


def _param_cut() -> str:
    """The recorded PARAM output cut inside the last value of its last result row ('44.287' -> '44.2')."""
    lines = (DATA / "param_2022_alltoall.txt").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip().startswith("COMMS-RES"))
    return "\n".join(lines[:last + 1])[:-2]


CUT = [  # (file name, content, format, pattern)
    ("AR_GPU2.csv", NCCL_HEADER + "\n".join(NCCL_ROWS)[:-2], "nccl-tests",
     r"AR_GPU2\.csv:4: the file ends inside a number \('58\.', no newline after the last row\): it was cut short"),
    ("AR_GPU2.csv", NCCL_HEADER + "\n".join(NCCL_ROWS)[:-1], "nccl-tests",
     r"AR_GPU2\.csv:4: the file ends in '58\.0' without a newline, where the rows above have 2 decimals"),
    ("AR_GPU2.csv", NCCL_HEADER + "\n".join(NCCL_ROWS)[:-6], "nccl-tests",
     r"AR_GPU2\.csv:4: 6 fields but the header has 7 columns"),
    ("all_reduce_perf.txt", _nccl_stdout_cut(), "nccl-tests", r"all_reduce_perf\.txt:\d+: \d+ fields but the header"),
    ("alltoall.txt", _param_cut(), "param",
     r"alltoall\.txt:\d+: the file ends in '44\.2' without a newline, where the rows above have 3 decimals"),
]


@pytest.mark.parametrize("name, text, fmt, pattern", CUT, ids=["csv-dot", "csv-decimals", "csv-fields",
                                                               "nccl-stdout", "param"])
def test_collective_table_cut_short_is_refused(home, tmp_path, name, text, fmt, pattern):
    path = write(tmp_path, name, text)
    refused(home, pattern, "collect", "import-comms", path, "--format", fmt, "--platform", "gpu-new",
            *(["--world-size", "4"] if fmt == "param" else []))


@pytest.mark.parametrize("name, text, fmt, pattern", [
    ("gen.csv", GENERIC_HEADER + "fully_connected,64,64,64,12.5\nfully_connected,64,64,64,216.", "generic",
     r"gen\.csv:3: the file ends inside a number \('216\.'"),
    ("gen.csv", GENERIC_HEADER + "fully_connected,64,64,64,12.5\nfully_connected,64,64", "generic",
     r"gen\.csv:3: 3 fields but the header has 5 columns"),
    ("gen.csv", "op,M,N,K,time_us,kernel\nfully_connected,64,64,64,12.5,\"a\"\nfully_connected,64,64,64,13,\"sgem",
     "generic", r"gen\.csv:3: the file ends inside a quoted field"),
    ("add.csv.gz", NEUSIGHT_HEADER + "add,0.0259,Tesla T4,127,168\nadd,0.0274,Tesla T4,223,11.", "neusight",
     r"add\.csv\.gz:3: the file ends inside a number \('11\.'"),
    ("add.csv", NEUSIGHT_HEADER + "add,0.0259,Tesla T4,127,168\nadd,0.0274,Tesla T4,223,11.", "neusight",
     r"add\.csv:3: the file ends inside a number \('11\.'"),
], ids=["generic-dot", "generic-fields", "generic-quote", "neusight-gz", "neusight"])
def test_kernel_table_cut_short_is_refused(home, tmp_path, name, text, fmt, pattern):
    path = write(tmp_path, name, text)
    refused(home, pattern, "collect", "import-ops", path, "--format", fmt, "--platform", "gpu-new")


def test_complete_table_without_a_final_newline_still_imports(home, tmp_path):
    """The rule is about cut rows, not newlines: a whole last row without a newline imports."""
    path = write(tmp_path, "AR_GPU2.csv", NCCL_HEADER + "\n".join(NCCL_ROWS))
    before = counts(home)
    code, out, err = cli(home, "collect", "import-comms", path, "--format", "nccl-tests", "--platform", "gpu-whole")
    assert code == 0, err
    after = counts(home)
    assert after["collective_measurements"] - before["collective_measurements"] == 6   # 3 sizes x 2 variants
    assert after["platforms"] == before["platforms"] + 1


# ---- negative, NaN and infinite numbers ----------------------------------------------------------------------
@pytest.mark.parametrize("row, pattern", [
    ("1048576,262144,float,44210,23.72,45100,-1", r":2: busbw is '-1': must be a non-negative number"),
    ("1048576,262144,float,44210,nan,45100,23.2", r":2: busbw is 'nan': must be a non-negative number"),
    ("1048576,262144,float,inf,23.72,45100,23.2", r":2: time is 'inf': must be a non-negative number"),
    ("1048576,262144,float,-44210,23.72,45100,23.2", r":2: time is '-44210'"),
    ("inf,262144,float,44210,23.72,45100,23.2", r":2: size is 'inf'"),
    ("1048576,-5,float,44210,23.72,45100,23.2", r":2: count is '-5'"),
], ids=["busbw-neg", "busbw-nan", "time-inf", "time-neg", "size-inf", "count-neg"])
def test_nccl_tests_bad_numbers_are_refused(home, tmp_path, row, pattern):
    path = write(tmp_path, "AR_GPU2.csv", NCCL_HEADER + row + "\n" + NCCL_ROWS[1] + "\n")
    refused(home, r"AR_GPU2\.csv" + pattern, "collect", "import-comms", path, "--format", "nccl-tests",
            "--platform", "gpu-new")


@pytest.mark.parametrize("value", ["-1.0", "nan", "inf"])
def test_param_bad_bus_bandwidth_is_refused(home, tmp_path, value):
    lines = (DATA / "param_2022_alltoall.txt").read_text().splitlines()
    last = max(i for i, line in enumerate(lines) if line.strip().startswith("COMMS-RES"))
    lines[last] = re.sub(r"\S+\s*$", value, lines[last])
    path = write(tmp_path, "alltoall.txt", "\n".join(lines) + "\n")
    refused(home, rf"alltoall\.txt:{last + 1}: busbw is '{value}': must be a non-negative number", "collect",
            "import-comms", path, "--format", "param", "--platform", "gpu-new", "--world-size", "4")


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_generic_bad_time_is_refused(home, tmp_path, value):
    path = write(tmp_path, "gen.csv", GENERIC_HEADER + f"fully_connected,64,64,64,12.5\nbmm,2,64,64,{value}\n")
    refused(home, rf"gen\.csv:3: time_us is '{value}': must be a positive number", "collect", "import-ops", path,
            "--format", "generic", "--platform", "gpu-new")


def test_spec_sheet_and_label_bad_numbers_are_refused(home, tmp_path):
    sheet = write(tmp_path, "gpu.json", '{"Device": "X1", "SingleFLOPs": Infinity, "Mem_Bw": 100}')
    refused(home, r"gpu\.json: SingleFLOPs is inf, not a positive number", "platform-specs", sheet)
    folder = tmp_path / "Tesla_T4"
    folder.mkdir()
    label = write(folder, "gpt2-train-64-2.json", json.dumps({"fw_latency": -1, "bwall_latency": 2,
                                                              "e2e_latency": 1}))
    refused(home, r"field fw_latency is -1, not a positive number of ms", "collect", "import-e2e", label,
            "--format", "neusight", "--platform", "t4", "--create-platform")


# ---- unknown platforms: one line everywhere, nothing created --------------------------------------------------
@pytest.mark.slow  # the first run of these commands in a process imports torch, fbgemm, transformers (~25 s)
def test_unknown_platform_is_the_same_line_everywhere(home, tmp_path):
    tables = write(tmp_path, "tables.json", json.dumps([{"num_rows": 100, "pooling": 2}] * 2))
    create = r", or pass --create-platform to create it\)"
    refused(home, UNKNOWN + create, "collect", "ops", "--platform", "typo", "--op", "relu", "--sweep", "quick",
            "--no-peaks", "--no-progress")
    refused(home, UNKNOWN + create, "collect", "peaks", "--platform", "typo")
    for args in (["collect", "comms", "--platform", "typo", "--world-size", "2", "--ops", "all_reduce"],
                 ["collect", "workload", "dlrm", "--platform", "typo"],
                 ["fit", "--all", "--platform", "typo"],
                 ["fit", "overheads", "--platform", "typo"],
                 ["shard", "--tables", tables, "--world-size", "2", "--platform", "typo"],
                 ["plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--system", "platform:typo"]):
        refused(home, UNKNOWN + r"\)$", *args)
    refused(home, r"unknown platform 'typo' \(known: [^;]+; register one with `pmdb platform-specs FILE --name typo`",
            "fit", "cross-gpu", "--target", "typo")
    (tmp_path / "model_configs").mkdir()
    write(tmp_path / "model_configs", "tiny_gpt2.json", json.dumps(TINY_GPT2))
    label = write(tmp_path, "tiny_gpt2-train-16-2.json", json.dumps({"fw_latency": 1, "bwall_latency": 2,
                                                                     "e2e_latency": 3}))
    refused(home, r"unknown platform 'typo' \(known: [^;]+; register the GPU with `pmdb platform-specs`, or pass "
                  r"--create-platform", "collect", "import-e2e", label, "--format", "neusight", "--platform", "typo",
            "--model-configs", tmp_path / "model_configs")


def test_create_platform_registers_this_machine_under_a_new_name(home):
    code, out, err = cli(home, "collect", "peaks", "--platform", "this-box", "--create-platform")
    assert code == 0, err
    with duckdb.connect(str(home / "pmdb.duckdb"), read_only=True) as conn:
        row = conn.execute("SELECT is_imported, fingerprint FROM platforms WHERE name = 'this-box'").fetchone()
        here = conn.execute("SELECT fingerprint FROM platforms WHERE NOT is_imported AND name <> 'this-box'").fetchone()
    assert row is not None and not row[0] and row[1] == here[0]


# ---- mistyped ids and paths: refused before a run row ---------------------------------------------------------
def test_mistyped_ids_and_paths_make_no_run(home, tmp_path):
    tables = write(tmp_path, "tables.json", json.dumps([{"num_rows": 100, "pooling": 2}] * 2))
    cases = [
        (r"no completed trace set for run nosuch", ["collect", "ops", "--from-run", "nosuch", "--no-progress"]),
        (r"no completed trace set for trace set 999", ["collect", "ops", "--from-trace-set", "999"]),
        (r"no completed trace set 999", ["collect", "mine-traces", "--trace-set", "999"]),
        (r"no task 999", ["collect", "workload", "dlrm", "--task", "999"]),
        (r"no Kineto traces of platform", ["fit", "overheads"]),
        (r"no task 999", ["shard", "--task", "999"]),
        (r"cannot read tables file .*missing\.json", ["shard", "--tables", tmp_path / "missing.json"]),
        (r"missing-plan\.json", ["shard", "--tables", tables, "--world-size", "2", "--plan",
                                 tmp_path / "missing-plan.json"]),
        (r"bad --top 0", ["plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--top", "0"]),
        (r"bad --workers 0", ["plan", "sweep", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8",
                              "--workers", "0"]),
        (r"cannot write .*x\.csv: directory", ["plan", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8",
                                                "-o", tmp_path / "nowhere" / "x.csv"]),
        (r"no such file: .*missing\.csv", ["plan", "validate", tmp_path / "missing.csv"]),
        (r"no such file: .*missing\.csv", ["collect", "import-comms", tmp_path / "missing.csv", "--format",
                                           "nccl-tests", "--platform", "gpu-new"]),
    ]
    for pattern, args in cases:
        refused(home, pattern, *args)


# ---- the platform functions the commands use --------------------------------------------------------------------
def test_platform_rules_write_nothing_when_refused(store):
    from pmdb import platform as platforms

    with pytest.raises(platforms.UnknownPlatform, match=r"'gpu-x' \(known: none; register one with `pmdb platform "
                                                        r"--name NAME`, or pass --trace-flag to create it\)"):
        platforms.ensure_named(store, "gpu-x", create=False, flag="--trace-flag")
    with pytest.raises(platforms.UnknownPlatform):
        platforms.resolve(store, "gpu-x")
    with pytest.raises(platforms.UnknownPlatform, match="or pass --create-platform to create it"):
        platforms.local(store, "box-x")
    assert platforms.known_names(store) == []
    assert platforms.local(store, "box-x", new=True) == "box-x" and not platforms.load(store, "box-x").is_imported
    assert platforms.ensure_named(store, "gpu-x") == "gpu-x"                      # importers create
    assert platforms.ensure_named(store, "gpu-x", create=False) == "gpu-x"        # an existing one is fine
    for n in range(10):
        platforms.ensure_named(store, f"gpu-{n}")
    message = str(platforms.UnknownPlatform("nope", platforms.known_names(store)))
    assert "(known: box-x, gpu-0, gpu-1, gpu-2, gpu-3, gpu-4 and 6 more; register" in message
