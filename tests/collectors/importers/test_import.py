"""The import into the real store: atomic, idempotent by content hash, attached to a named platform."""
import shutil
from pathlib import Path

import pytest

from collectors.importers import nccl_tests, param
from collectors.importers.common import ImportHints, collective_from_name, import_files
from pmdb.errors import PmdbError

DATA = Path(__file__).resolve().parent / "data"


@pytest.mark.parametrize("name, collective", [("AR_GPU8.csv", "all_reduce"), ("a2a-results.txt", "all_to_all"),
                                              ("all_gather_perf.log", "all_gather"), ("alltoallv_8.txt",
                                                                                      "all_to_allv"),
                                              ("RS_2.csv", "reduce_scatter"), ("results.txt", None)])
def test_collective_from_name(name, collective):
    assert collective_from_name(Path(name)) == collective


def test_import_param_rows(store):
    report = import_files(store, [DATA / "param_2024_allgather_reducescatter.txt"], "param", param.parse,
                          platform="dgx-v100", topology="NVLink hybrid cube mesh")
    assert report.imported[0][1:] == (10, "all_gather,reduce_scatter", 8)
    rows = store.query("SELECT * FROM v_collective_measurements ORDER BY collective_id")
    assert len(rows) == 10 and rows["rank"].isna().all() and (rows["split_kind"] == "equal").all()
    assert (rows["source"] == "param").all() and (rows["platform"] == "dgx-v100").all()
    gather = rows[rows["collective"] == "all_gather"].iloc[-1]
    assert gather["max_rank_bytes"] == 67108864 and list(gather["sent_bytes"]) == [67108864 // 8] * 8
    assert gather["busbw_gbps"] == 76.493 and gather["lat_p50_us"] == 767.7
    sha = store.scalar("SELECT sha256 FROM imported_files")
    assert (rows["source_file"] == sha).all()
    platform_row = store.query("SELECT is_imported, interconnect, device_kind FROM platforms WHERE name = 'dgx-v100'")
    assert platform_row.iloc[0].tolist() == [True, "NVLink hybrid cube mesh", "cuda"]


def test_import_is_idempotent_by_content(store, tmp_path):
    path = DATA / "nccl_tests_all_reduce_perf_2gpu.txt"
    copy = tmp_path / "copy_all_reduce.txt"
    shutil.copy(path, copy)
    first = import_files(store, [path], "nccl-tests", nccl_tests.parse, platform="a100")
    assert first.run_id and len(first.imported) == 1
    again = import_files(store, [copy, path], "nccl-tests", nccl_tests.parse, platform="a100")
    assert again.run_id is None and not again.imported
    reasons = dict(again.skipped)
    assert reasons[copy].startswith("already imported") and reasons[path].startswith(f"same content as {copy}")
    assert store.scalar("SELECT count(*) FROM collective_measurements") == 26
    assert store.scalar("SELECT count(*) FROM collection_runs WHERE kind = 'import-comms'") == 1


def test_malformed_file_imports_nothing(store, tmp_path):
    bad = tmp_path / "AR_bad.csv"
    bad.write_text("size(B),count,type,time(ns),busbw(GB/s)\n1048576,262144,float,44210,23.72\n2097152,oops\n")
    with pytest.raises(PmdbError, match=r"AR_bad.csv:3: 2 fields but the header has 5"):
        import_files(store, [DATA / "nccl_tests_all_reduce_perf_2gpu.txt", bad], "nccl-tests", nccl_tests.parse,
                     platform="a100")
    for table in ("collective_measurements", "imported_files", "collection_runs"):
        assert store.scalar(f"SELECT count(*) FROM {table}") == 0
    assert store.scalar("SELECT count(*) FROM platforms WHERE name = 'a100'") == 0


def test_missing_file_and_bad_hints(store, tmp_path):
    with pytest.raises(PmdbError, match="no such file"):
        import_files(store, [tmp_path / "nope.txt"], "param", param.parse, platform="x")
    with pytest.raises(PmdbError, match="--collective"):
        ImportHints(collective="broadcast")
    with pytest.raises(PmdbError, match="at least 2"):
        ImportHints(world_size=1)
    binary = tmp_path / "AR_bin.csv"
    binary.write_bytes(b"size(B),count\n\xff\xfe\n")
    with pytest.raises(PmdbError, match=r"AR_bin.csv:2: not a UTF-8 text file"):
        import_files(store, [binary], "nccl-tests", nccl_tests.parse, platform="x")
