"""Format coverage without code changes (every supported ET schema layout), and refusals: unknown schemas and
malformed files give one clear line naming the problem, and nothing is stored."""
import gzip
import json
import re
import subprocess
import sys

import pytest

from collectors.traces.et import parse_et
from collectors.traces.files import read_trace_file
from collectors.traces.ingest import RankTraces, ingest_trace_set
from collectors.traces.kineto import parse_kineto
from pmdb.traces.rows import storage_edges
from pmdb import platform
from pmdb.cli.main import main
from pmdb.errors import PmdbError

REQUIRED_SCHEMAS = ["1.0.1", "1.0.2", "1.0.3-chakra.0.0.4", "1.1.0-chakra.0.0.4", "1.1.1-chakra.0.0.4"]
ADD_SCHEMA = "aten::add_.Tensor(Tensor(a!) self, Tensor other, *, Scalar alpha=1) -> Tensor(a!)"


def _t(tensor_id, storage, numel=4):
    return [tensor_id, storage, 0, numel, 4, "cpu"]


# (id, name, parent, rf_id, op_schema, inputs [(value, type, shape)], outputs [(value, type, shape)])
NODES = [
    (1, "[pytorch|profiler|execution_trace|process]", 1, 0, "", [], []),
    (2, "[pytorch|profiler|execution_trace|thread]", 1, 0, "", [], []),
    (3, "ProfilerStep#1", 2, 1, "", [], []),
    (4, "aten::mul", 3, 2, "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor",
     [(_t(10, 11), "Tensor(float)", [4]), (2, "Int", [])], [(_t(12, 13), "Tensor(float)", [4])]),
    (5, "aten::add_", 3, 3, ADD_SCHEMA,
     [(_t(14, 15), "Tensor(float)", [4]), (_t(12, 13), "Tensor(float)", [4]), (1, "Int", [])],
     [(_t(14, 15), "Tensor(float)", [4])]),
    (6, "aten::cat", 3, 4, "aten::cat(Tensor[] tensors, int dim=0) -> Tensor",
     [([_t(14, 15), _t(12, 13)], "GenericList[Tensor(float),Tensor(float)]", [[4], [4]]), (0, "Int", [])],
     [(_t(16, 17, 8), "Tensor(float)", [8])]),
]


def _node(version, node):
    node_id, name, parent, rf_id, schema, inputs, outputs = node
    values = lambda items: [v for v, _, _ in items]  # noqa: E731
    types = lambda items: [t for _, t, _ in items]  # noqa: E731
    shapes = lambda items: [s for _, _, s in items]  # noqa: E731
    attrs = {"rf_id": rf_id, "fw_parent": 0, "seq_id": -1, "scope": 0, "tid": 1, "fw_tid": 0, "op_schema": schema}
    if "chakra" not in version:
        return {"id": node_id, "name": name, "parent": parent, **attrs, "inputs": values(inputs),
                "input_shapes": shapes(inputs), "input_types": types(inputs), "outputs": values(outputs),
                "output_shapes": shapes(outputs), "output_types": types(outputs)}
    io = lambda items: {"values": values(items), "shapes": shapes(items), "types": types(items)}  # noqa: E731
    ins, outs = io(inputs), io(outputs)
    if version.startswith("1.1.1"):
        ins["strides"], outs["strides"] = [[1] for _ in inputs], [[1] for _ in outputs]
    return {"id": node_id, "name": name, "ctrl_deps": parent, "inputs": ins, "outputs": outs,
            "attrs": [{"name": k, "type": "uint64" if isinstance(v, int) else "string", "value": v}
                      for k, v in attrs.items()]}


def _et_doc(version):
    return {"schema": version, "pid": 7, "time": "2024-01-01 00:00:00", "start_ts": 1, "finish_ts": 2,
            "nodes": [_node(version, n) for n in NODES]}


@pytest.mark.parametrize("version", REQUIRED_SCHEMAS)
def test_every_supported_et_schema_parses_to_the_same_rows(version):
    et = parse_et(_et_doc(version), "synthetic")
    nodes = et.nodes.set_index("op_id")
    assert et.version == version and list(nodes.index) == [n[0] for n in NODES]
    assert nodes["parent_id"].tolist()[1:] == [1, 2, 3, 3, 3] and et.nodes["parent_id"].isna().iloc[0]
    assert nodes.at[6, "input_tensors"] == [[0, *_t(14, 15)], [0, *_t(12, 13)]]
    assert nodes.at[4, "attrs"]["scalars"] == {"1": 2}
    assert nodes["category"].tolist() == ["et_root", "et_root", "user_annotation", "cpu_op", "cpu_op", "cpu_op"]
    assert nodes.loc[[3, 4, 5, 6], "iteration"].tolist() == [0, 0, 0, 0] and et.iterations == 1
    edges = storage_edges(et.nodes, level="all")
    # mul writes storage 13; add_ writes 15 in place (schema a!); cat reads both
    assert sorted(map(tuple, edges.to_numpy().tolist())) == [(4, 5, 13), (4, 6, 13), (5, 6, 15)]


def _kineto_doc(version=1):
    return {"schemaVersion": version, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {}}]}


def _write(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return path


def _bad_et_node():
    doc = _et_doc("1.1.1-chakra.0.0.4")
    del doc["nodes"][3]["ctrl_deps"]
    return doc


def _bad_event():
    doc = _kineto_doc()
    del doc["traceEvents"][0]["dur"]
    return doc


BAD_FILES = [
    ("k.json", b"{not json", parse_kineto, r"not valid JSON \(Expecting property name.*line 1, column 2\)"),
    ("k.json.gz", b"\x1f\x8b\x08\x00garbage", parse_kineto, r"corrupt gzip"),
    ("k.json", b"  \n", parse_kineto, r"the file is empty"),
    ("k.json", b"[1, 2]", parse_kineto, r"must be a JSON object, found a list"),
    ("k.json", {"traceEvents": []}, parse_kineto, r"Kineto trace has no schema version field; supported versions: 1"),
    ("k.json", _kineto_doc(99), parse_kineto, r"unknown Kineto trace schema 99; supported: 1"),
    ("k.json", _bad_event(), parse_kineto, r"event #0 \('aten::mul', cpu_op\) lacks a numeric 'dur'"),
    ("e.json", _et_doc("2.0.0-chakra.0.0.9"), parse_et, r"unknown execution trace schema '2.0.0-chakra.0.0.9'; "
                                                        r"supported: 1.0.1, .*1.1.1-chakra.0.0.4"),
    ("e.json", _bad_et_node(), parse_et, r"node #3 \(id 4\) lacks 'ctrl_deps', required by schema 1.1.1"),
    ("e.json", _kineto_doc(), parse_et, r"this is a Kineto trace, not an execution trace"),
    ("k.json", _et_doc("1.0.1"), parse_kineto, r"this is an execution trace \(schema '1.0.1'\)"),
]


@pytest.mark.parametrize("name, content, parser, message", BAD_FILES)
def test_malformed_and_unknown_files_are_refused_with_the_reason(tmp_path, name, content, parser, message):
    path = _write(tmp_path, name, content)
    with pytest.raises(PmdbError, match=message) as info:
        parser(read_trace_file(path).doc, str(path))
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_a_bad_rank_stores_nothing(store, tmp_path):
    good = _write(tmp_path, "good.json", _kineto_doc())
    bad = _write(tmp_path, "bad.json.gz", gzip.compress(json.dumps(_et_doc("9.9")).encode()))
    name = platform.resolve(store, None)
    with pytest.raises(PmdbError, match="unknown execution trace schema '9.9'"):
        with store.run("trace", name, {}) as run:
            ingest_trace_set(store, run.run_id, name, [RankTraces(0, good, None), RankTraces(1, None, bad)])
    assert store.scalar("SELECT count(*) FROM trace_sets") == 0
    assert store.scalar("SELECT status FROM collection_runs") == "failed"
    assert not list((store.workspace.artifacts / "traces").iterdir())


@pytest.mark.parametrize("args, message", [
    (["--kineto", "{bad}"], r"bad\.json: not valid JSON"),
    (["--et", "{unknown}"], r"unknown execution trace schema '3\.0'"),
    (["--kineto", "{good}", "--et", "{unknown}", "--et", "{unknown}"],
     r"--kineto is given 1 time\(s\) but there are 2 rank"),
    (["--kineto", "{good}", "--trace-set", "5"], r"say which with --rank"),
    (["--kineto", "{good}", "--rank", "0", "--trace-set", "5"], r"no trace set 5"),
    (["--kineto", "{good}", "--profiled-with", "et"], r"bad --profiled-with 'et'"),
])
def test_cli_refusals_are_one_line_and_exit_2(workspace, tmp_path, capsys, args, message):
    files = {"bad": _write(tmp_path, "bad.json", b"{oops"), "good": _write(tmp_path, "good.json", _kineto_doc()),
             "unknown": _write(tmp_path, "unknown.json", _et_doc("3.0"))}
    argv = ["--home", str(workspace.home), "collect", "trace", "--platform", "elsewhere",
            *[a.format(**files) for a in args]]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pmdb: error: ") and re.search(message, err[0]), err


def test_cli_process_exit_code_for_an_unknown_schema(workspace, tmp_path):
    path = _write(tmp_path, "et.json", _et_doc("0.9"))
    proc = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(workspace.home), "collect", "trace",
                           "--et", str(path), "--platform", "elsewhere"], capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(lines) == 1 and "unknown execution trace schema '0.9'" in lines[0]
