"""nccl-tests stdout (new and old headers) and its CSV form (the shared A100 files)."""
from pathlib import Path

import pytest

from collectors.importers.common import ImportHints, settle_world_size
from collectors.importers.nccl_tests import parse
from pmdb.errors import PmdbError

DATA = Path(__file__).resolve().parent / "data"


def _parse(path, hints=None):
    parsed = parse(path, path.read_text(), hints or ImportHints())
    parsed.world_size = settle_world_size(parsed, hints or ImportHints())
    return parsed


def test_shared_a100_csv(shared_data):
    folder = shared_data / "collectives" / "vtrain_a100_allreduce"
    for n in range(2, 9):
        path = folder / f"AR_GPU{n}.csv"
        parsed = _parse(path)
        assert parsed.world_size == n  # from the busbw/algbw ratio 2(n-1)/n
        assert {r.collective for r in parsed.rows} == {"all_reduce"}
        out, inplace = [r for r in parsed.rows if not r.in_place], [r for r in parsed.rows if r.in_place]
        assert len(out) == len(inplace) == len(path.read_text().splitlines()) - 1
        first = path.read_text().splitlines()[1].split(",")
        assert out[0].size_bytes == int(first[0]) and out[0].lat_us == pytest.approx(int(first[3]) / 1000)
        assert inplace[0].lat_us == pytest.approx(int(first[5]) / 1000)
        assert out[0].busbw_gbps == float(first[4]) and out[0].algbw_gbps is None
        assert out[0].dtype == "float32"


def test_stdout_new_header():
    parsed = _parse(DATA / "nccl_tests_all_reduce_perf_2gpu.txt")
    assert parsed.stated_world_size == 2 == parsed.world_size
    assert (parsed.iterations, parsed.warmup) == (20, 5)
    assert len(parsed.rows) == 2 * 13 and {r.in_place for r in parsed.rows} == {False, True}
    last_out = [r for r in parsed.rows if r.in_place is False][-1]
    assert last_out.size_bytes == 134217728 and last_out.busbw_gbps == last_out.algbw_gbps


def test_stdout_old_header_with_na_in_place():
    parsed = _parse(DATA / "nccl_tests_alltoall_old_4gpu.txt")
    assert parsed.world_size == 4 and {r.collective for r in parsed.rows} == {"all_to_all"}
    assert len(parsed.rows) == 6 and all(r.in_place is False for r in parsed.rows)  # in-place was N/A
    assert parsed.iterations == 50


def test_collective_must_be_known(tmp_path):
    neutral = tmp_path / "out.csv"
    neutral.write_text("size(B),count,type,time(ns),busbw(GB/s)\n1024,256,float,5000,0.2\n")
    with pytest.raises(PmdbError, match="give --collective"):
        parse(neutral, neutral.read_text(), ImportHints())
    rows = parse(neutral, neutral.read_text(), ImportHints(collective="all_gather")).rows
    assert rows[0].collective == "all_gather" and rows[0].in_place is None and rows[0].lat_us == 5.0


@pytest.mark.parametrize("body, pattern", [
    ("size(B),count,type,time(ns),busbw(GB/s)\n1024,256,float,5000\n", r"AR_x.csv:2: 4 fields but the header has 5"),
    ("size(B),count,type,time(ns),busbw(GB/s)\n1024,256,float,soon,0.2\n", r"AR_x.csv:2: time is 'soon'"),
    ("size(B),count,type,time(ps),busbw(GB/s)\n", r"AR_x.csv:1: unknown time unit 'ps'"),
    ("bytes,seconds,rate\n1,2,3\n", r"AR_x.csv:1: not an nccl-tests header"),
    ("#  size count type redop time algbw busbw #wrong\n  1024 256 float sum 5.0 0.2 0.2 3\n",
     r"AR_x.csv:2: nccl-tests found 3 wrong results"),
    ("   1024 256 float sum 5.0 0.2 0.2 0\n", r"AR_x.csv:1: a result line before"),
])
def test_malformed(tmp_path, body, pattern):
    path = tmp_path / "AR_x.csv"
    path.write_text(body)
    with pytest.raises(PmdbError, match=pattern):
        parse(path, body, ImportHints())
