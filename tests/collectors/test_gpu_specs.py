"""GPU spec sheets (NeuSight's device_configs, real files) and a Kineto trace's deviceProperties into a real store."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from collectors import gpu_specs
from pmdb import platform as platforms
from pmdb.errors import PmdbError


def sheets_dir(shared: Path) -> Path:
    return shared / "gpu_kernels" / "neusight" / "device_configs"


def trace_file(shared: Path) -> Path:
    found = sorted((shared / "traces" / "gpu" / "hta_a100_16rank_rank0").glob("*.json*"))
    assert len(found) == 1, found
    return found[0]


def register_all_sheets(store, shared: Path) -> list[str]:
    items = []
    for path in sorted(sheets_dir(shared).glob("*.json")):
        sheet, details, digest = gpu_specs.read_sheet(path)
        items.append(gpu_specs.SheetSource(sheet, source_file=str(path), sha256=digest, details=details))
    return gpu_specs.register_all(store, items)


def test_the_nine_real_sheets_register(store, shared_data):
    names = register_all_sheets(store, shared_data)
    assert len(names) == 9 and len(set(names)) == 9
    assert {"tesla-v100-pcie-32gb", "nvidia-l4", "nvidia-h100-80gb-hbm3", "nvidia-a100-sxm4-40gb"} <= set(names)
    v100 = gpu_specs.load(store, "tesla-v100-pcie-32gb")
    assert v100 == gpu_specs.GpuSheet(device="Tesla V100-PCIE-32GB", fp32_flops=14029e9, mem_bw=900e9, sm_count=80,
                                      cores_per_sm=64, clock_mhz=1370.0, l2_bytes=6 * 2 ** 20,
                                      memory_bytes=32 * 2 ** 30)
    assert gpu_specs.peaks(store, "nvidia-l4") == {"gemm_flops": 31334e9, "mem_bw": 300e9}
    for name in names:
        platform = platforms.load(store, name)
        assert platform.is_imported and platform.cuda and platform.semantics.value == "async_device"
    raw = json.loads(store.scalar("SELECT details FROM gpu_specs WHERE platform = 'tesla-p4'"))
    assert raw["SingleFLOPs"] == 5699  # the file as read
    listed = gpu_specs.listing(store)
    assert len(listed) == 9 and max(len(line) for line in listed.to_string(index=False).splitlines()) <= 80
    again = register_all_sheets(store, shared_data)  # registering again replaces, never duplicates
    assert again == names and store.scalar("SELECT count(*) FROM gpu_specs") == 9


@pytest.mark.parametrize("text, pattern", [
    ('{"Device": "X", "Mem_Bw": 100}', r"bad.json: the spec sheet lacks SingleFLOPs \(FP32 peak, GFLOP/s\)$"),
    ('{"Device": "X"}', r"lacks SingleFLOPs .* and Mem_Bw \(memory bandwidth, GB/s\)$"),
    ('{"Device": "X", "SingleFLOPs": "fast", "Mem_Bw": 1}', r"bad.json: SingleFLOPs is 'fast', not a positive"),
    ('{"SingleFLOPs": 1, "Mem_Bw": 1}', r"bad.json: no device name"),
    ("Device: X\nSingleFLOPs: 1\n", r"bad.json:1: not a JSON spec sheet"),
    ('[{"Device": "X"}]', r"bad.json: a spec sheet is one JSON object"),
])
def test_a_bad_sheet_is_one_clear_error(tmp_path, text, pattern):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(PmdbError, match=pattern) as caught:
        gpu_specs.read_sheet(path)
    assert "\n" not in str(caught.value)


def test_trace_device_properties(store, shared_data):
    sheet, details, _ = gpu_specs.sheet_from_trace(trace_file(shared_data))
    assert sheet == gpu_specs.GpuSheet(device="NVIDIA A100-SXM4-80GB", fp32_flops=None, mem_bw=None, sm_count=108,
                                       memory_bytes=84990623744)
    assert details["computeMajor"] == 8
    name = gpu_specs.register(store, sheet, source="trace-device-properties")
    assert name == "nvidia-a100-sxm4-80gb" and gpu_specs.peaks(store, name) == {}
    assert platforms.load(store, name).gpu.memory_bytes == 84990623744


def test_a_trace_never_overwrites_a_sheets_figures(store, shared_data):
    path = sheets_dir(shared_data) / "NVIDIA_A100-SXM4-40GB.json"
    sheet, _, _ = gpu_specs.read_sheet(path)
    gpu_specs.register(store, sheet, "a100")
    before = gpu_specs.load(store, "a100")
    traced, details, _ = gpu_specs.sheet_from_trace(trace_file(shared_data))
    gpu_specs.register(store, traced, "a100", source="trace-device-properties", details=details)
    assert gpu_specs.load(store, "a100") == before  # 40 GiB and the FLOP/s stay
    assert store.scalar("SELECT source FROM gpu_specs WHERE platform = 'a100'") == "spec-sheet"
    bare = gpu_specs.GpuSheet(device="Some GPU", fp32_flops=None, mem_bw=None, sm_count=10)
    gpu_specs.register(store, bare, "bare", source="trace-device-properties")
    gpu_specs.register(store, sheet, "bare")  # a sheet replaces a trace's partial figures
    assert gpu_specs.load(store, "bare") == sheet


def test_sheets_never_go_to_this_machine_and_all_or_none(store, shared_data):
    here = platforms.register_local(store)["name"]
    good, _, _ = gpu_specs.read_sheet(sheets_dir(shared_data) / "Tesla_T4.json")
    with pytest.raises(PmdbError, match="is this machine"):
        gpu_specs.register_all(store, [gpu_specs.SheetSource(good), gpu_specs.SheetSource(good, here)])
    assert store.scalar("SELECT count(*) FROM gpu_specs") == 0
    assert platforms.known_names(store) == [here]
