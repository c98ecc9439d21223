"""Kernel measurements recorded elsewhere (NeuSight tables, the generic CSV/Parquet format) into a real store, on small
slices of the real NeuSight tables in ../shared/data (header kept, first rows only)."""
from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.importers import generic_ops, neusight
from collectors.importers.ops_common import import_op_files, read_table
from pmdb import platform as platforms
from pmdb.errors import PmdbError

V100 = "Tesla_V100-PCIE-32GB"
T4 = "Tesla_T4"


def real_slice(shared: Path, gpu: str, op: str, out: Path, rows: int = 50, gz: bool = False) -> Path:
    """The header and the first ``rows`` rows of a real NeuSight table, written under ``out``."""
    lines = gzip.decompress((shared / "gpu_kernels" / "neusight" / gpu / f"{op}.csv.gz").read_bytes()) \
        .decode().splitlines(keepends=True)[:rows + 1]
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{op}.csv{'.gz' if gz else ''}"
    data = "".join(lines).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def source_rows(path: Path) -> pd.DataFrame:
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def parse_file(path: Path, module=neusight):
    return module.parse(path, read_table(path, path.read_bytes()))


def counts(store) -> dict[str, int]:
    return {t: store.scalar(f"SELECT count(*) FROM {t}")
            for t in ("platforms", "collection_runs", "imported_files", "op_measurements")}


def stored(store, op: str | None = None) -> pd.DataFrame:
    where = "WHERE op = ?" if op else ""
    return store.query(f"SELECT * FROM op_measurements {where} ORDER BY measurement_id", [op] if op else [])


def test_gemm_columns_name_the_reduced_dimension_n(shared_data, tmp_path):
    """The mapping's claim, on 300 real V100 linear and bmm rows: cuBLAS's grid is ceil(out / tileM) x ceil(rows /
    tileN) with out = NeuSight's K, so N is the reduced dimension (pmdb K) and K the output one (pmdb N)."""
    checked = 0
    for op in ("linear", "bmm"):
        path = real_slice(shared_data, V100, op, tmp_path / op, rows=300)
        parsed, raw = parse_file(path), source_rows(path)
        assert len(parsed.rows) == len(raw) == 300
        for params, kernels, (_, src) in zip(parsed.rows["params"], parsed.rows["kernels"], raw.iterrows()):
            p, main = json.loads(params), json.loads(kernels)[0]
            assert (p["K"], p["N"]) == (int(src["N"]), int(src["K"]))  # the swap
            if op == "linear":
                assert p["B"] == 1 and p["M"] == int(src["B"]) * int(src["M"])
            else:
                assert (p["B"], p["M"]) == (int(src["B"]), int(src["M"])) and main["grid_z"] == p["B"]
            tile = re.search(r"sgemm_(\d+)x(\d+)(_sliced1x4)?_(tn|nn)$", main["name"])
            if tile:
                checked += 1
                assert main["grid_x"] == math.ceil(p["N"] / int(tile.group(1))), (src.to_dict(), main)
                assert main["grid_y"] == math.ceil(p["M"] / int(tile.group(2))), (src.to_dict(), main)
    assert checked >= 500


@pytest.mark.parametrize("op, pmdb_op, expect", [
    ("linear", "fully_connected", lambda s: {"B": 1, "M": int(s["B"]) * int(s["M"]), "K": int(s["N"]),
                                             "N": int(s["K"])}),
    ("bmm", "bmm", lambda s: {"B": int(s["B"]), "M": int(s["M"]), "K": int(s["N"]), "N": int(s["K"])}),
    ("add", "add", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("addu", "add_scalar", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("div", "div_tensor", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("divu", "div", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("pow", "pow_tensor", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("powu", "pow", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("mulu", "mul_scalar", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("gelu", "gelu", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("softmax", "softmax", lambda s: {"M": int(s["B"]), "N": int(s["H"])}),
    ("ln", "layer_norm", lambda s: {"B": 1, "M": int(s["B"]), "N": int(s["H"])}),
    ("conv", "conv2d", lambda s: {"B": int(s["B"]), "IC": int(s["Input_Channel"]), "OC": int(s["Output_Channel"]),
                                  "FH": int(s["Kernel_Szie"]), "FW": int(s["Kernel_Szie"]),
                                  "H": int(s["Input_Size"]) + 2 * int(s["Padding"]), "stride": int(s["Stride"]),
                                  "pad": int(s["Padding"]), "dilation": 1, "is_depthwise": 0}),
])
def test_each_neusight_op_lands_with_its_mapping(store, shared_data, tmp_path, op, pmdb_op, expect):
    path = real_slice(shared_data, V100, op, tmp_path, gz=True)
    raw = source_rows(path)
    report = import_op_files(store, [path], "neusight", neusight.parse, platform="v100")
    assert report.run_id and report.imported == [(path, 50, pmdb_op)]
    rows = stored(store)
    assert len(rows) == 50 and set(rows["op"]) == {pmdb_op}
    assert set(rows["pass"]) == {"fwd"} and set(rows["cache_state"]) == {"device"}
    assert set(rows["device"]) == {"cuda:0"} and set(rows["dtype"]) == {"float32"}
    assert rows["run_id"].eq(report.run_id).all() and rows["config_key"].str.len().eq(64).all()
    latency = raw["Latency"].astype(float).to_numpy() * 1000.0                 # ms -> µs
    # the file's host floor: its 1 % quantile; conv's fastest rows are real work (no plateau): its fastest latency
    floor = latency.min() if op == "conv" else np.quantile(latency, 0.01)
    assert rows["host_floor_us"].to_numpy() == pytest.approx(np.full(50, floor), rel=1e-12)
    assert rows["host_lead_us"].to_numpy() == pytest.approx(np.full(50, 0.56 * floor), rel=1e-12)
    for (_, row), (_, src) in zip(rows.iterrows(), raw.iterrows()):
        assert json.loads(row["params"]) == expect(src)
        assert row["single_call_us"] == pytest.approx(float(src["Latency"]) * 1000.0, rel=1e-12)   # kept as read
        assert row["median_us"] == pytest.approx(row["single_call_us"] - 0.56 * floor, rel=1e-12)  # device time
        kernels = json.loads(row["kernels"])
        main = [k for k in kernels if k.get("main")]
        assert len(main) == 1 and main[0]["name"] == src["Kernel Name"]
        assert (main[0]["grid_x"], main[0]["block_x"]) == (int(src["Grid x"]), int(src["Block x"]))
        assert main[0]["warps_per_sm"] == pytest.approx(float(src["Warps per SM"]))
        if "Kernels" in src:  # every launched kernel, in launch order
            assert [k["name"] for k in kernels] == [k for k in src["Kernels"].split(";") if k]
    platform = platforms.load(store, "v100")
    assert platform.is_imported and platform.cuda and platform.gpu.name == "Tesla V100-PCIE-32GB"
    assert (platform.row["torch_version"], platform.row["cuda_version"]) == ("2.1.0", "12.1")
    summary = json.loads(store.scalar("SELECT summary FROM collection_runs WHERE run_id = ?", [report.run_id]))
    assert summary["software"] == {"torch": "2.1.0", "cuda": "12.1", "cudnn": "8902"}
    assert store.scalar("SELECT status FROM collection_runs WHERE run_id = ?", [report.run_id]) == "completed"


def test_conv_keeps_every_launched_kernel_in_order(shared_data, tmp_path):
    path = real_slice(shared_data, V100, "conv", tmp_path)
    parsed, raw = parse_file(path), source_rows(path)
    row = json.loads(parsed.rows["kernels"][0])  # winograd: data, filter, the sgemm (main), output
    assert [k["name"] for k in row] == [k for k in raw["Kernels"][0].split(";") if k]
    assert len(row) == 4 and row[2]["name"] == raw["Kernel Name"][0] == "volta_sgemm_64x64_nn"
    assert row[2]["main"] is True and (row[2]["grid_x"], row[2]["grid_y"], row[2]["grid_z"]) == (3, 6, 36)
    assert all("grid_x" not in k for i, k in enumerate(row) if i != 2)


def test_reimport_is_skipped_and_stores_nothing_new(store, shared_data, tmp_path):
    path = real_slice(shared_data, V100, "ln", tmp_path)
    first = import_op_files(store, [path], "neusight", neusight.parse, platform="v100")
    before = counts(store)
    copy = tmp_path / "copy" / "ln.csv"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    again = import_op_files(store, [path, copy], "neusight", neusight.parse, platform="v100")
    assert again.run_id is None and again.imported == []
    assert [p for p, _ in again.skipped] == [path, copy]
    assert "already imported" in again.skipped[0][1] and "same content as" in again.skipped[1][1]
    assert counts(store) == before and first.run_id


@pytest.mark.parametrize("damage, line, message", [
    (lambda lines: lines.__setitem__(10, re.sub(r"^linear,[^,]+,", "linear,abc,", lines[10])), 11,
     r"Latency is 'abc', not a number"),
    (lambda lines: lines.__setitem__(49, lines[49].rsplit(",", 2)[0] + "\n"), 50,
     r"18 fields but the header has 20 columns"),
    (lambda lines: lines.__setitem__(7, lines[7].rsplit(",", 1)[0] + ",-5\n"), 8,
     r"K is '-5': must be a non-negative number"),
    (lambda lines: lines.__setitem__(9, lines[9].rsplit(",", 1)[0] + ",0\n"), 10, r"linear: K must be positive"),
    (lambda lines: lines.__setitem__(30, lines[30].replace("linear,", "lineaer,", 1)), 31,
     r"NeuSight op 'lineaer' has no pmdb mapping"),
    (lambda lines: lines.__setitem__(20, lines[20].replace("Tesla V100-PCIE-32GB", "Tesla T4")), 21,
     r"Device 'Tesla T4' differs from 'Tesla V100-PCIE-32GB'"),
])
def test_a_bad_line_is_one_error_and_nothing_is_stored(store, shared_data, tmp_path, damage, line, message):
    good = real_slice(shared_data, V100, "ln", tmp_path / "good")
    path = real_slice(shared_data, V100, "linear", tmp_path / "bad")
    lines = path.read_text().splitlines(keepends=True)
    damage(lines)
    path.write_text("".join(lines))
    with pytest.raises(PmdbError, match=rf"^{re.escape(str(path))}:{line}: {message}") as caught:
        import_op_files(store, [good, path], "neusight", neusight.parse, platform="v100")
    assert "\n" not in str(caught.value)
    assert counts(store) == {"platforms": 0, "collection_runs": 0, "imported_files": 0, "op_measurements": 0}


def test_the_earliest_bad_line_is_reported(shared_data, tmp_path):
    path = real_slice(shared_data, V100, "bmm", tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    lines[40] = re.sub(r"^bmm,[^,]+,", "bmm,nan,", lines[40])       # latency, line 41
    lines[12] = lines[12].rsplit(",", 1)[0] + ",x\n"                # the last shape column, line 13
    path.write_text("".join(lines))
    with pytest.raises(PmdbError, match=r"bmm.csv:13: K is 'x', not a number$"):
        parse_file(path)


def test_truncated_gzip_and_empty_file(tmp_path, shared_data):
    path = real_slice(shared_data, V100, "add", tmp_path, gz=True)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(PmdbError, match=r"add.csv.gz: broken or truncated gzip file"):
        parse_file(path)
    empty = tmp_path / "empty.csv"
    empty.write_text("\n\n")
    with pytest.raises(PmdbError, match=r"empty.csv: empty file"):
        parse_file(empty)
    header_only = tmp_path / "header.csv"
    header_only.write_text("OPName,Latency,B,H\n")
    assert parse_file(header_only).rows.empty


def test_files_of_two_devices_are_refused(store, shared_data, tmp_path):
    v100 = real_slice(shared_data, V100, "softmax", tmp_path / "v100")
    t4 = real_slice(shared_data, T4, "softmax", tmp_path / "t4")
    with pytest.raises(PmdbError, match=r"several GPUs \(Tesla T4, Tesla V100-PCIE-32GB\)"):
        import_op_files(store, [v100, t4], "neusight", neusight.parse, platform="gpu")
    assert counts(store)["op_measurements"] == 0 and counts(store)["platforms"] == 0


def test_this_machine_is_never_the_target(store, shared_data, tmp_path):
    here = platforms.register_local(store)["name"]
    path = real_slice(shared_data, V100, "relu", tmp_path)
    before = counts(store)
    with pytest.raises(PmdbError, match=rf"platform '{re.escape(here)}' is this machine"):
        import_op_files(store, [path], "neusight", neusight.parse, platform=here)
    assert counts(store) == before
    import_op_files(store, [path], "neusight", neusight.parse, platform="v100")
    with pytest.raises(PmdbError, match=r"'v100' is a cuda platform, not cpu"):
        import_op_files(store, [path], "generic", generic_ops.parse, platform="v100", device_kind="cpu")


def _generic_frame() -> pd.DataFrame:
    return pd.DataFrame({"op": ["linear", "bmm", "layer_norm", "my_fused_op"],
                         "M": [64, 8, 32, 7], "N": [128, 16, 1024, None], "K": [256, 32, None, None],
                         "B": [None, 4, 2, None], "Q": [None, None, None, 3.5],
                         "device": ["NVIDIA L4"] * 4, "kernel": ["sm89_sgemm", "", "", ""]})


@pytest.mark.parametrize("form", ["time_ms", "time_us", "time+unit", "parquet"])
def test_generic_csv_and_parquet_with_each_time_form(store, tmp_path, form):
    frame = _generic_frame()
    times_us = [12.5, 40.0, 7.25, 3.0]
    if form == "time_ms":
        frame["time_ms"] = [t / 1000 for t in times_us]
    elif form == "time+unit":
        frame["time"] = [0.0125, 40.0, 7250.0, 3.0]
        frame["unit"] = ["ms", "us", "ns", "µs"]
    else:
        frame["time_us"] = times_us
    path = tmp_path / ("m.parquet" if form == "parquet" else "m.csv")
    frame.to_parquet(path) if form == "parquet" else frame.to_csv(path, index=False)
    report = import_op_files(store, [path], "generic", generic_ops.parse, platform="nvidia-l4")
    assert report.imported == [(path, 4, "bmm,fully_connected,layer_norm,my_fused_op")]
    rows = stored(store)
    assert rows["median_us"].tolist() == pytest.approx(times_us, rel=1e-12)
    assert rows[["single_call_us", "host_floor_us", "host_lead_us"]].isna().all().all()   # device times as given
    assert [json.loads(p) for p in rows["params"]] == [
        {"B": 1, "M": 64, "N": 128, "K": 256}, {"B": 4, "M": 8, "N": 16, "K": 32}, {"B": 2, "M": 32, "N": 1024},
        {"M": 7, "Q": 3.5}]
    assert json.loads(rows["kernels"][0]) == [{"name": "sm89_sgemm"}] and pd.isna(rows["kernels"][1])
    assert platforms.load(store, "nvidia-l4").gpu.name == "NVIDIA L4"


@pytest.mark.parametrize("body, pattern", [
    ("M,N,time_us\n1,2,3\n", r"m.csv:1: no 'op' column"),
    ("op,M,N\nrelu,1,2\n", r"m.csv:1: give exactly one time column"),
    ("op,M,N,time_us,time_ms\nrelu,1,2,3,4\n", r"give exactly one time column"),
    ("op,M,N,time\nrelu,1,2,3\n", r"a 'time' column needs a 'unit' column"),
    ("op,M,N,time,unit\nrelu,1,2,3,us\nrelu,1,2,3,min\n", r"m.csv:3: unit is 'min'"),
    ("op,M,N,time_us\nrelu,1,2,3\nrelu,1,,3\n", r"m.csv:3: relu needs parameter N$"),
    ("op,M,time_us\nrelu,1,3\n", r"m.csv:2: relu needs parameter N \(no N column\)"),
    ("op,M,N,K,B,time_us\nlinear,1,2,3,4,5\n", r"m.csv:2: fully_connected: B is fixed at 1, not 4"),
    ("op,M,N,time_us\nrelu,1,2,0\n", r"m.csv:2: time_us is '0': must be a positive number"),
    ("op,M,N,pass,time_us\nrelu,1,2,back,3\n", r"m.csv:2: pass is 'back'"),
    ("op,time_us\nmy_op,3\n", r"m.csv:2: my_op: no parameter columns with values"),
    ("op,M N,time_us\nrelu,1,3\n", r"parameter column name\(s\) 'M N'"),
    ("\nop,M,N,time_us\n\nrelu,1,2,3\n   \nrelu,1,x,3\n", r"m.csv:6: N is 'x', not a number$"),
    ('op,M,N,time_us,kernel\nrelu,1,2,3,"a\nb"\nrelu,1,2,-3,k\n', r"m.csv:4: time_us is '-3'"),
])
def test_generic_errors(tmp_path, body, pattern):
    path = tmp_path / "m.csv"
    path.write_text(body)
    with pytest.raises(PmdbError, match=pattern) as caught:
        parse_file(path, generic_ops)
    assert "\n" not in str(caught.value)


def test_generic_cpu_rows_are_warm(store, tmp_path):
    path = tmp_path / "cpu.csv"
    path.write_text("op,M,N,time_us,std_us,repetitions,device\nrelu,64,128,5.5,0.25,20,cpu\n")
    import_op_files(store, [path], "generic", generic_ops.parse, platform="other-box", device_kind="cpu")
    row = stored(store).iloc[0]
    assert (row["cache_state"], row["device"], row["std_us"], row["repetitions"]) == ("warm", "cpu", 0.25, 20)
    assert platforms.load(store, "other-box").device_kind.value == "cpu"


def test_generic_parquet_errors_name_the_row(store, tmp_path):
    path = tmp_path / "m.parquet"
    pd.DataFrame({"op": ["relu", "relu"], "M": [1, 2], "N": [3, None], "time_us": [1.0, 2.0]}).to_parquet(path)
    with pytest.raises(PmdbError, match=r"m.parquet:2: relu needs parameter N$"):
        import_op_files(store, [path], "generic", generic_ops.parse, platform="gpu")
    path.write_bytes(b"PAR1 not really")
    with pytest.raises(PmdbError, match=r"m.parquet: not a Parquet file"):
        import_op_files(store, [path], "generic", generic_ops.parse, platform="gpu")


def test_files_of_another_gpu_never_join_a_platform(store, shared_data, tmp_path):
    t4 = real_slice(shared_data, T4, "mul", tmp_path / "t4")
    v100 = real_slice(shared_data, V100, "mul", tmp_path / "v100")
    import_op_files(store, [t4], "neusight", neusight.parse, platform="tesla-t4")
    before = counts(store)
    with pytest.raises(PmdbError, match=r"platform 'tesla-t4' is a Tesla T4, but the files were measured on "
                                        r"Tesla V100-PCIE-32GB"):
        import_op_files(store, [v100], "neusight", neusight.parse, platform="tesla-t4")
    assert counts(store) == before


def test_imported_rows_say_where_they_came_from(store, shared_data, tmp_path):
    """Migration 0004: import-ops rows carry source 'import' (mined rows 'trace', microbenchmarks the default)."""
    table = shared_data / "gpu_kernels" / "neusight" / "Tesla_V100-PCIE-32GB" / "relu.csv.gz"
    if not table.is_file():
        pytest.skip(f"{table} not present")
    lines = gzip.decompress(table.read_bytes()).decode().splitlines()[:21]
    path = tmp_path / "relu.csv"
    path.write_text("\n".join(lines) + "\n")
    import_op_files(store, [path], "neusight", neusight.parse, platform="v100-src")
    assert store.query("SELECT DISTINCT source FROM op_measurements WHERE platform = 'v100-src'")["source"].tolist() \
        == ["import"]


def test_one_import_gives_its_floor_to_a_table_without_a_plateau(store, shared_data, tmp_path):
    """conv has no plateau: in an import with the add table it takes add's floor; imported alone, its fastest
    latency (its 1 % quantile would lie above the floor every latency is at least)."""
    folder = shared_data / "gpu_kernels" / "neusight" / V100
    add, conv = folder / "add.csv.gz", folder / "conv.csv.gz"
    import_op_files(store, [add, conv], "neusight", neusight.parse, platform="v100")
    floors = store.query("SELECT op, min(host_floor_us) AS lo, max(host_floor_us) AS hi, "
                         "max(abs(median_us - (single_call_us - host_lead_us))) AS off "
                         "FROM op_measurements GROUP BY op ORDER BY op").set_index("op")
    add_floor = np.quantile(pd.read_csv(add)["Latency"] * 1000.0, 0.01)
    assert floors.loc["conv2d", "lo"] == floors.loc["conv2d", "hi"] == pytest.approx(add_floor)
    assert floors.loc["add", "lo"] == pytest.approx(add_floor) and floors["off"].max() < 1e-9
    alone = tmp_path / "conv.csv"                                           # the same table, other bytes, alone
    alone.write_bytes(gzip.decompress(conv.read_bytes()))
    import_op_files(store, [alone], "neusight", neusight.parse, platform="v100-conv")
    own = (pd.read_csv(alone)["Latency"] * 1000.0).min()
    assert store.scalar("SELECT max(abs(host_floor_us - ?)) FROM op_measurements WHERE platform = 'v100-conv'",
                        [own]) < 1e-9 and own > 1.5 * add_floor
