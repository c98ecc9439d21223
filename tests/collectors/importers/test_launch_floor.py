"""The host floor of single-call latency tables (collectors/importers/launch_floor.py) against what was measured
both ways: /work/shared/data/gpu_kernels/h200_launch_floor.csv times each op single-call (NeuSight's way) and back to
back on one H200. Nothing in the rule was fitted on that file: the floor comes from each op's own single-call rows,
the lead share from the NeuSight element-wise tables (checked here too)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from collectors.importers import launch_floor

SHARED = Path(__file__).resolve().parents[3].parent / "shared" / "data"
H200 = SHARED / "gpu_kernels" / "h200_launch_floor.csv"
NEUSIGHT = SHARED / "gpu_kernels" / "neusight"
ELEMENTWISE = ("add", "addu", "mul", "mulu", "div", "divu", "pow", "powu", "relu", "gelu", "tanh")
GPUS = ("Tesla_P4", "Tesla_T4", "Tesla_P100-PCIE-16GB", "Tesla_V100-PCIE-32GB", "NVIDIA_A100-PCIE-40GB")
DEVICE_BOUND_US = 100.0   # back to back above this the GPU, not the host's ~11-41 µs dispatch, bounds the op


@pytest.fixture(scope="module")
def h200() -> pd.DataFrame:
    if not H200.is_file():
        pytest.skip(f"shared data not present at {H200}")
    frame = pd.read_csv(H200)
    frame["device_us"] = np.nan
    for _, rows in frame.groupby("op"):        # one "table" per op, as an import sees one file per op
        host = launch_floor.table_floor(rows["single_call_us"].to_numpy())
        frame.loc[rows.index, "device_us"] = host.device_us(rows["single_call_us"].to_numpy())
    return frame


def test_removing_the_floor_lands_on_the_back_to_back_time_of_big_kernels(h200):
    big = h200[h200["back_to_back_us"] >= DEVICE_BOUND_US]
    assert len(big) == 20 and set(big["op"]) == {"linear", "bmm", "add", "gelu", "ln", "softmax", "mulu"}
    separated = big["device_us"] / big["back_to_back_us"] - 1
    single = big["single_call_us"] / big["back_to_back_us"] - 1
    # median |error| 1.4 % (single-call 4.8 %), every op within 15.1 % (softmax 65536 x 4096, whose single-call time
    # is 142 µs above its back-to-back time, far more than any host floor)
    assert np.median(np.abs(separated)) < 0.02 < np.median(np.abs(single))
    assert np.abs(separated).max() < 0.16
    assert (np.abs(separated) <= np.abs(single) + 1e-9).all()
    gemm = big[big["op"] == "linear"]    # e.g. 1024 x 1024 x 4096: single 210, back to back 181, separated 183
    assert np.abs(gemm["device_us"] / gemm["back_to_back_us"] - 1).max() < 0.03


def test_hidden_kernels_stay_below_the_host_bound_back_to_back_time(h200):
    tiny = h200[(h200["op"].isin(["add", "gelu", "softmax", "mulu"])) & (h200["shape"].str.contains("H=1024"))
                & ~h200["shape"].str.contains("B=8192")]
    # a hidden kernel's device time is only bounded above (F - c); back to back it is host-bound at ~11-14 µs
    assert len(tiny) == 16 and (tiny["device_us"] < tiny["single_call_us"] * 0.6).all()
    assert np.median(tiny["device_us"] / tiny["back_to_back_us"]) < 1.0


def test_the_lead_share_is_what_the_element_wise_tables_show():
    if not NEUSIGHT.is_dir():
        pytest.skip(f"shared data not present at {NEUSIGHT}")
    shares = []
    for gpu in GPUS:
        for op in ELEMENTWISE:
            table = pd.read_csv(NEUSIGHT / gpu / f"{op}.csv.gz", usecols=["Latency", "B", "H"])
            shares.append(launch_floor.lead_share(table["Latency"].to_numpy() * 1000.0,
                                                  (table["B"] * table["H"]).to_numpy(dtype=float)))
    shares = np.array(shares)
    assert np.isfinite(shares).all() and len(shares) == 55
    assert np.median(shares) == pytest.approx(launch_floor.LEAD_SHARE, abs=0.01)
    assert 0.45 < np.quantile(shares, 0.1) and np.quantile(shares, 0.9) < 0.7


def test_a_table_round_trips_above_its_floor():
    latency = np.array([30.0, 31.0, 30.5, 45.0, 400.0, 2000.0])
    host = launch_floor.table_floor(latency)
    assert host.floor_us == pytest.approx(np.quantile(latency, 0.01))
    assert host.lead_us == pytest.approx(launch_floor.LEAD_SHARE * host.floor_us)
    device = host.device_us(latency)
    assert device[-1] == pytest.approx(2000.0 - host.lead_us) and (device > 0).all()
    np.testing.assert_allclose(host.latency_us(device)[3:], latency[3:])
    assert host.latency_us(np.array([1.0]))[0] == host.floor_us      # a tiny kernel shows the floor
    with pytest.raises(ValueError):
        launch_floor.table_floor(np.array([0.0, np.nan]))


def neusight_latency(gpu: str, op: str) -> np.ndarray:
    return pd.read_csv(NEUSIGHT / gpu / f"{op}.csv.gz", usecols=["Latency"])["Latency"].to_numpy() * 1000.0


def test_only_conv_tables_lack_a_plateau():
    """The plateau test separates the tables whose fastest rows pile up at the host floor (2 % quantile <= 1.07x
    the 1 %) from conv's, whose fastest rows are real work (>= 1.35x)."""
    if not NEUSIGHT.is_dir():
        pytest.skip(f"shared data not present at {NEUSIGHT}")
    for gpu in GPUS[:4]:
        for path in sorted((NEUSIGHT / gpu).glob("*.csv.gz")):
            op = path.name.split(".")[0]
            assert launch_floor.has_plateau(neusight_latency(gpu, op)) == (op != "conv"), (gpu, op)


def test_a_table_without_a_plateau_takes_the_import_floor():
    """V100: conv's own 1 % quantile (123 µs) lies above its fastest rows (68 µs) and its lead (0.56 x 123 = 69 µs)
    would erase them; it takes the median floor of the import's plateau tables instead, the others keep theirs."""
    if not NEUSIGHT.is_dir():
        pytest.skip(f"shared data not present at {NEUSIGHT}")
    ops = ("add", "relu", "linear", "ln", "conv")
    tables = [neusight_latency(GPUS[3], op) for op in ops]
    floors = launch_floor.import_floors(tables)
    own = [launch_floor.table_floor(t) for t in tables]
    assert floors[:4] == own[:4]
    expect = float(np.median([f.floor_us for f in own[:4]]))
    assert floors[4].floor_us == pytest.approx(expect) and floors[4].lead_us == pytest.approx(0.56 * expect)
    assert own[4].lead_us > tables[4].min() > 1.3 * floors[4].floor_us       # the old lead erased the fastest rows
    device = floors[4].device_us(tables[4])
    assert (device > 0.5 * tables[4]).all()                                  # no row clipped at the guard
    fastest = tables[4].min()
    alone = launch_floor.import_floors(tables[4:])[0]                        # one table: its fastest latency
    assert alone.floor_us == fastest and alone.lead_us == pytest.approx(0.56 * fastest)
    assert (alone.device_us(tables[4]) >= 0.44 * fastest - 1e-9).all()      # none clipped at the guard
    capped = launch_floor.import_floors([tables[0] + 500.0, tables[4]])      # never above its fastest latency
    assert capped[1].floor_us == fastest
    single = launch_floor.import_floors(tables[:1])                          # a lone plateau table: its own
    assert single == own[:1]


def test_settling_an_import_rewrites_the_device_time_of_its_tables():
    frames = [pd.DataFrame({"op": "add", "single_call_us": np.r_[np.full(50, 30.0), np.linspace(40, 900, 50)],
                            "median_us": 0.0, "host_floor_us": 0.0, "host_lead_us": 0.0}),
              pd.DataFrame({"op": "conv2d", "single_call_us": np.linspace(90, 3000, 200), "median_us": 0.0,
                            "host_floor_us": 0.0, "host_lead_us": 0.0}),
              pd.DataFrame({"op": "gelu", "single_call_us": np.nan, "median_us": 7.0, "host_floor_us": np.nan,
                            "host_lead_us": np.nan}, index=range(5))]       # a device time as given
    launch_floor.settle_import(frames)
    assert (frames[0]["host_floor_us"] == 30.0).all() and (frames[1]["host_floor_us"] == 30.0).all()
    np.testing.assert_allclose(frames[1]["median_us"], frames[1]["single_call_us"] - 0.56 * 30.0)
    assert frames[2]["median_us"].eq(7.0).all() and frames[2]["host_floor_us"].isna().all()
