"""collectors.traces.files: a gzipped trace is stored as its own bytes (no second compression), a plain one
compressed; both under the sha256 of the content; and the importer keeps no decoded JSON once a rank is parsed."""
import gzip
import hashlib
import json

from collectors.traces.files import read_trace_file, store_artifact
from collectors.traces.ingest import RankTraces, parse_ranks

DOC = {"schemaVersion": 1, "deviceProperties": [], "traceEvents": [
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0.0, "dur": 10.0},
    {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0,
     "args": {"Input Dims": [[4], [4]]}}]}


def test_a_gzipped_trace_is_stored_as_its_own_bytes_a_plain_one_compressed(tmp_path, workspace):
    raw = json.dumps(DOC).encode()
    plain, packed = tmp_path / "k.json", tmp_path / "k.json.gz"
    plain.write_bytes(raw)
    packed.write_bytes(gzip.compress(raw, compresslevel=1))
    for path in (packed, plain):
        trace = read_trace_file(path)
        assert trace.raw == raw and trace.doc == DOC and trace.sha256 == hashlib.sha256(raw).hexdigest()
        assert trace.gzipped == (packed.read_bytes() if path == packed else None)
        stored = workspace.home / store_artifact(workspace, trace)
        assert stored.name == f"{trace.sha256}.json.gz" and gzip.decompress(stored.read_bytes()) == raw
        if path == packed:
            assert stored.read_bytes() == packed.read_bytes()   # the file's own gzip, not recompressed
            stored.unlink()


def test_parsed_ranks_keep_the_files_bytes_not_their_decoded_json(tmp_path):
    path = tmp_path / "k.json"
    path.write_text(json.dumps(DOC))
    rank, = parse_ranks([RankTraces(0, path, None)])
    assert rank.kineto_file.doc is None and rank.kineto_file.raw == path.read_bytes()
    assert list(rank.kineto.ops["name"]) == ["ProfilerStep#1", "aten::add"]
