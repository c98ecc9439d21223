"""System descriptions: the shipped files load; bad files are refused with the field named."""
import json
from importlib import resources

import pytest

from pmdb.errors import PmdbError
from planner.system import load, shipped


def test_shipped_systems_load_with_spec_sheet_numbers():
    assert set(shipped()) >= {"a100", "a100-40gb", "h100", "h200", "b200"}
    a100, h100, h200 = load("a100"), load("h100"), load("h200")
    assert a100.matrix_flops("bf16") == 312e12 and a100.hbm_bw == 2039e9
    assert h100.matrix_flops("bf16") == h200.matrix_flops("bf16") and h200.hbm_bytes > h100.hbm_bytes
    assert load("b200").nvlink_bw == 2 * h100.nvlink_bw
    assert a100.with_domain(64).nvlink_domain == 64 and a100.with_domain(64).name == "a100@nvs64"


def _write(tmp_path, changes, drop=()):
    data = json.loads(resources.files("planner.systems").joinpath("h100.json").read_text())
    data.update(changes)
    for key in drop:
        if "." in key:
            outer, inner = key.split(".")
            del data[outer][inner]
        else:
            del data[key]
    path = tmp_path / "sys.json"
    path.write_text(json.dumps(data))
    return str(path)


@pytest.mark.parametrize("changes, drop, pattern", [
    ({"nvlink_bandwith": 1}, (), "unknown field 'nvlink_bandwith'"),
    ({}, ("hbm_gbps",), "missing field 'hbm_gbps'"),
    ({}, ("efficiency.hbm",), r"efficiency: missing field 'hbm'"),
    ({"efficiency": {"matrix": 0.8, "vector": 0.8, "hbm": 0.85, "flash_attention": 0.6, "nvlink": 0.7,
                     "network": 0.7, "hbm_usable": 0.9, "pcie": 1}}, (), "unknown field 'pcie'"),
    ({"efficiency": {"matrix": 1.8, "vector": 0.8, "hbm": 0.85, "flash_attention": 0.6, "nvlink": 0.7,
                     "network": 0.7, "hbm_usable": 0.9}}, (), r"efficiency.matrix must be at most 1"),
    ({"hbm_gb": "lots"}, (), "hbm_gb must be a number"),
    ({"nvlink_domain": 0}, (), "nvlink_domain must be positive"),
    ({"matrix_tflops": {"fp12": 3}}, (), "unknown dtype 'fp12'"),
])
def test_bad_system_files_name_the_field(tmp_path, changes, drop, pattern):
    with pytest.raises(PmdbError, match=pattern):
        load(_write(tmp_path, changes, drop))


def test_unknown_system_and_missing_dtype(tmp_path):
    with pytest.raises(PmdbError, match="unknown system 'tpu'"):
        load("tpu")
    with pytest.raises(PmdbError, match="no matrix_tflops for fp8"):
        load("a100").matrix_flops("fp8")
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(PmdbError, match="not valid JSON"):
        load(str(tmp_path / "broken.json"))
