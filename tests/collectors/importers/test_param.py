"""PARAM comms.py stdout: every column variant, parsed by header names; malformed input names file and line."""
from pathlib import Path

import pytest

from collectors.importers.common import ImportHints, settle_world_size
from collectors.importers.param import parse
from pmdb.errors import PmdbError

DATA = Path(__file__).resolve().parent / "data"


def _parse(name, hints=None):
    path = DATA / name
    parsed = parse(path, path.read_text(), hints or ImportHints())
    parsed.world_size = settle_world_size(parsed, hints or ImportHints())
    return parsed


@pytest.mark.parametrize("name, collectives, world, dtype, rows", [
    ("param_2021_allreduce.txt", {"all_reduce"}, 8, None, 13),
    ("param_2022_alltoall.txt", {"all_to_all"}, 4, None, 11),
    ("param_2024_allgather_reducescatter.txt", {"all_gather", "reduce_scatter"}, 8, "float32", 10),
    ("param_2026_allreduce_bf16.txt", {"all_reduce"}, 2, "bfloat16", 6),
])
def test_variants(name, collectives, world, dtype, rows):
    parsed = _parse(name)
    assert {r.collective for r in parsed.rows} == collectives
    assert parsed.world_size == world and len(parsed.rows) == rows
    assert {r.dtype for r in parsed.rows} == {dtype}
    for row in parsed.rows:
        assert row.lat_min_us <= row.lat_us <= row.lat_p95_us <= row.lat_max_us


def _line_values(name, line):
    return (DATA / name).read_text().splitlines()[line - 1].split()[1:]


@pytest.mark.parametrize("name", ["param_2021_allreduce.txt", "param_2024_allgather_reducescatter.txt",
                                  "param_2026_allreduce_bf16.txt"])
def test_values_come_from_the_named_columns(name):
    for row in _parse(name).rows:
        values = _line_values(name, row.line)
        # size (B), nElementsPerRank, p50, p75, p95, Min, Max, AlgBW, BusBW[, TotalLatency]
        assert row.size_bytes == int(values[0]) and row.lat_us == float(values[2])
        assert row.lat_p95_us == float(values[4]) and row.lat_min_us == float(values[5])
        assert row.algbw_gbps == float(values[7]) and row.busbw_gbps == float(values[8])


def test_glued_header_names_are_split():
    # "BusBW(GB/s)TotalLatency(us):p50": PARAM prints a 20-character name in a 20-wide column
    header = (DATA / "param_2026_allreduce_bf16.txt").read_text().splitlines()[1]
    assert "BusBW(GB/s)   TotalTime" in header
    glued = header.replace("BusBW(GB/s)   TotalTime(us):p50", "BusBW(GB/s)TotalTime(us):p50")
    text = glued + "\n\tCOMMS-RES-all_reduce-float32  1024  256  10.0  11.0  12.0  9.0  13.0  0.102  0.102  10.5\n"
    row = parse(Path("x.txt"), text, ImportHints()).rows[0]
    assert row.busbw_gbps == 0.102 and row.lat_us == 10.0


def test_header_order_not_position_decides():
    text = ("\tCOMMS-RES  Max  Min  p95  Latency(us):p50  size (B)  BusBW(GB/s)\n"
            "\tCOMMS-RES-all_to_all  90.0  40.0  80.0  50.0  4096  0.041\n")
    row = parse(Path("x.txt"), text, ImportHints()).rows[0]
    assert (row.size_bytes, row.lat_us, row.lat_p95_us, row.lat_min_us, row.lat_max_us, row.busbw_gbps) == \
        (4096, 50.0, 80.0, 40.0, 90.0, 0.041)
    assert row.algbw_gbps is None


def test_2021_needs_the_collective_from_somewhere(tmp_path):
    neutral = tmp_path / "results.txt"
    neutral.write_text((DATA / "param_2021_allreduce.txt").read_text())
    with pytest.raises(PmdbError, match=r"results.txt:5: .*give --collective"):
        parse(neutral, neutral.read_text(), ImportHints())
    rows = parse(neutral, neutral.read_text(), ImportHints(collective="all_reduce")).rows
    assert len(rows) == 13


@pytest.mark.parametrize("text, pattern", [
    ("\tCOMMS-RES-all_reduce  1024  256  10.0\n", r"x.txt:1: .*before any COMMS-RES header"),
    ("\tCOMMS-RES  size (B)  Latency(us):p50  p95\n\tCOMMS-RES-all_reduce  1024  10.0\n",
     r"x.txt:2: 2 values but the header has 3"),
    ("\tCOMMS-RES  size (B)  Latency(us):p50\n\tCOMMS-RES-all_reduce  1024  fast\n", r"x.txt:2: p50 is 'fast'"),
    ("\tCOMMS-RES  size (B)  Latency(us):p50\n\tCOMMS-RES-broadcast  1024  10.0\n", r"x.txt:2: .*'broadcast'"),
    ("\tCOMMS-RES  nElementsPerRank  p95\n", r"x.txt:1: .*lacks size and p50"),
    ("\tCOMMS-RES-QUANT\t size (B)  nElementsPerRank\n", r"x.txt:1: quantized"),
    ("\tCOMMS-RES  total-size (B)  nElementsPerRank  nElementsPairPerRank  Latency(us):p50\n", r"collective-pair"),
    ("\tCOMMS-RES  size (B)  Latency(us):p50\n\tCOMMS-RES-all_reduce  1024  0.0\n", r"x.txt:2: .*must be positive"),
])
def test_malformed(text, pattern):
    with pytest.raises(PmdbError, match=pattern):
        parse(Path("x.txt"), text, ImportHints())


def test_world_size_contradiction_is_refused():
    path = DATA / "param_2022_alltoall.txt"
    parsed = parse(path, path.read_text(), ImportHints(world_size=8))
    with pytest.raises(PmdbError, match="means world size 4, but --world-size says 8"):
        settle_world_size(parsed, ImportHints(world_size=8))
