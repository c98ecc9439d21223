"""benchmarks/gpu_label_gemms.py: the local plane reads a table back where the table is a power law, the GEMM nodes of
a real label breakdown (GPT-2 large b1 on the V100) are found with their shapes and layer counts, and a missing shared
folder is one line and exit 2."""
from __future__ import annotations

from harness import load_benchmark

import numpy as np
import pytest


def _module():
    return load_benchmark("gpu_label_gemms")


def test_the_local_plane_reads_a_power_law_table_back():
    mod = _module()
    rng = np.random.default_rng(1)
    sizes = np.exp(rng.uniform(np.log(64), np.log(8192), size=(300, 3)))
    latency = 0.002 * sizes[:, 0] ** 0.9 * sizes[:, 1] * sizes[:, 2] ** 1.1 / 1e3   # µs, exact in ln space
    table = mod.Table(np.log(sizes), latency)
    got, dist = table.at([1000.0, 1280.0, 3840.0])
    assert got == pytest.approx(0.002 * 1000 ** 0.9 * 1280 * 3840 ** 1.1 / 1e3, rel=1e-6)
    assert dist > 0
    assert table.self_check() < 0.1   # % GMAE: the plane is exact, leaving a row out changes nothing


def test_gpt2_gemm_nodes_and_the_table_beside_them(shared_data):
    folder = shared_data / "gpu_e2e" / "neusight_labels" / "Tesla_V100-PCIE-32GB"
    csv = folder / "gpt2_large-train-1024-1.csv.gz"
    if not csv.is_file():
        pytest.skip(f"{csv} not present")
    mod = _module()
    nodes = {n["name"]: n for n in mod.gemm_nodes(csv, num_layer=36)}
    assert set(nodes) == {"addmm", "addmm_1", "addmm_2", "addmm_3", "matmul", "matmul_1", "lm_head"}
    assert nodes["addmm_3"]["sizes"] == [1024, 5120, 1280] and nodes["addmm_3"]["count"] == 36
    assert nodes["lm_head"]["sizes"] == [1024, 1280, 50257] and nodes["lm_head"]["count"] == 1
    assert nodes["matmul"]["table"] == "bmm" and nodes["matmul"]["sizes"] == [20, 1024, 64, 1024]
    tables = mod.load_tables(shared_data / "gpu_kernels" / "neusight" / "Tesla_V100-PCIE-32GB")
    table_us, _ = tables["linear"].at(nodes["lm_head"]["sizes"])
    assert 0.5 < nodes["lm_head"]["label_us"] / table_us < 2.0   # the same GPU model: within a factor of two
    assert mod.backward_sizes("linear", [1024, 5120, 1280]) == [[1024, 1280, 5120], [1280, 1024, 5120]]
    assert mod.backward_sizes("bmm", [20, 1024, 64, 1024]) == [[20, 1024, 1024, 64], [20, 64, 1024, 1024]]


def test_a_missing_shared_folder_is_one_line_and_exit_2(tmp_path, capsys):
    assert _module().main(["--shared", str(tmp_path / "nowhere")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
