"""`pmdb fit --platform GPU` on imported NeuSight rows (small slices of the real V100 tables, ../shared/data; skipped
without it): roofline from the spec sheet, mlp and gbdt with held-out test metrics, the champion, backward GEMM
versions the simulator finds, and the one-line errors."""
from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fitters import gemm_shapes
from fitters.fit import DEFAULT_BUDGET_MINUTES
from fitters.load import load_model
from fitters.selection import MIN_VALIDATION_CONFIGS
from pmdb.cli import fit_models
from pmdb.config import Workspace
from pmdb.platform import Semantics
from pmdb.store import Store

from .conftest import cli, one_line_error

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
NEUSIGHT = SHARED / "gpu_kernels" / "neusight"
V100 = "Tesla_V100-PCIE-32GB"
SLICES = {"linear": 200, "bmm": 200, "ln": 120, "softmax": 120}
FWD = ["bmm.fwd.device~v100", "fully_connected.fwd.device~v100", "layer_norm.fwd.device~v100",
       "softmax.fwd.device~v100"]
BWD = ["bmm.bwd.device~v100", "fully_connected.bwd.device~v100"]


def write_slice(gpu_dir: str, op: str, out: Path, rows: int, seed: int = 0) -> Path:
    table = pd.read_csv(NEUSIGHT / gpu_dir / f"{op}.csv.gz", dtype=str, keep_default_na=False)
    table = table.sample(min(rows, len(table)), random_state=seed)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / f"{op}.csv.gz", index=False, compression="gzip")
    return out / f"{op}.csv.gz"


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, mlflow_template) -> tuple[Workspace, str]:
    """V100 slices imported with the V100 sheet, then `pmdb fit --platform v100 --all` with a tiny budget and one
    candidate per search (30 epochs for the mlp: what the 3 s cap left of the default searches on a loaded host), its
    searches in this process (``--jobs 1``: the same versions as worker processes give, tests/fitters/test_fit_pool.py,
    without starting two that import torch and scikit-learn)."""
    if not NEUSIGHT.is_dir():
        pytest.skip(f"shared data not present at {SHARED}")
    root = tmp_path_factory.mktemp("gpufit")
    ws = Workspace(root / "ws")
    assert cli(ws.home, "init")[0] == 0
    shutil.copy(mlflow_template.mlflow_db, ws.mlflow_db)
    for i, (op, rows) in enumerate(SLICES.items()):
        write_slice(V100, op, root / "v100", rows, seed=i)
    assert cli(ws.home, "platform-specs", NEUSIGHT / "device_configs" / f"{V100}.json", "--name", "v100")[0] == 0
    assert cli(ws.home, "collect", "import-ops", root / "v100", "--format", "neusight", "--platform", "v100")[0] == 0
    code, out, err = cli(ws.home, "fit", "--platform", "v100", "--all", "--trials", "1", "--max-epochs", "30",
                         "--budget-minutes", "0.05", "--jobs", "1", "--no-progress")
    assert code == 0, err
    return ws, out


def test_every_forward_group_gets_three_families_with_test_metrics(shared_data, fitted):
    ws, out = fitted
    with Store.open(ws, read_only=True) as store:
        versions = store.query("SELECT * FROM model_versions ORDER BY name, version")
        champions = store.query("SELECT name, version FROM model_aliases WHERE alias = 'champion'")
    assert sorted(versions["name"].unique()) == sorted(FWD + BWD)
    fwd = versions[versions["pass"] == "fwd"]
    for name, rows in fwd.groupby("name"):
        assert sorted(rows["family"]) == ["gbdt", "mlp", "roofline"], name
        assert (rows["cache_state"] == "device").all()
        assert rows["test_gmae"].map(math.isfinite).all() and (rows["n_test"] > 0).all()
        assert (rows["n_train"] + rows["n_test"] == SLICES[{"bmm": "bmm", "fully_connected": "linear",
                                                           "layer_norm": "ln", "softmax": "softmax"}
                                                          [rows["op"].iloc[0]]]).all()
        assert rows["validation_gmae"].map(math.isfinite).all()     # every family scored where the choice is made
        few = rows["validation_configs"].min() < MIN_VALIDATION_CONFIGS      # chosen without the test split
        best = rows.loc[(rows["family"] == "roofline").idxmax() if few else rows["validation_gmae"].idxmin(), "version"]
        assert champions.set_index("name").loc[name, "version"] == best
    roofline = fwd[fwd["family"] == "roofline"].iloc[0]
    assert '"peak_flops": 14029000000000.0' in roofline["params"] and '"peak_bw": 900000000000.0' in \
        roofline["params"]                               # the sheet's FP32 rate and bandwidth
    assert re.search(r"\bfully_connected\.bwd\.device\s+\d+\s+gemm_shapes", out)
    assert "model versions registered on v100" in out


def test_backward_gemms_are_priced_from_the_forward_champion(shared_data, fitted):
    from simulator.model_set import load_model_set

    ws, _ = fitted
    params = pd.DataFrame({"B": [1.0, 1.0, 1.0], "M": [512.0, 2048.0, 64.0], "N": [1024.0, 768.0, 4096.0],
                           "K": [1024.0, 3072.0, 256.0]})
    with Store.open(ws) as store:
        versions = store.query("SELECT name, family, n_test, test_gmae, data_hash FROM model_versions "
                               "WHERE pass = 'bwd' ORDER BY name")
        models = load_model_set(store, "v100", semantics=Semantics.ASYNC_DEVICE)
        hashes = store.query("SELECT name, data_hash FROM model_versions WHERE pass = 'fwd'")
    assert versions["name"].tolist() == BWD and (versions["family"] == "gemm_shapes").all()
    assert (versions["n_test"] == 0).all() and versions["test_gmae"].isna().all()   # nothing measured backward
    assert set(versions["data_hash"]) <= set(hashes["data_hash"])   # trained on the forward rows
    for op in ("fully_connected", "bmm"):
        forward = load_model(ws, f"{op}.fwd.device~v100", "champion")
        ref = models.kernel(op, "bwd")     # what simulator/timing.py asks for an op's backward pass
        assert ref is not None and ref.family == "gemm_shapes"
        frame = params.assign(B=[1.0, 4.0, 12.0]) if op == "bmm" else params
        assert ref.model.bounds["M"] > 1 and ref.model.bounds["N"] > 1     # the forward training range
        parts = [gemm_shapes.chunk_rows(gemm_shapes.orient(p, ref.model.bounds), ref.model.bounds["M"])
                 for p in gemm_shapes.shapes(op, "bwd", frame)]          # rows beyond the trained ones: chunks
        if op == "fully_connected":
            parts = [(p.drop(columns=["B"]), k) for p, k in parts]
        expected = sum(np.asarray(forward.predict(p)) * k for p, k in parts)
        np.testing.assert_allclose(ref.model.predict(frame), expected, rtol=1e-6)
        assert (expected > 0).all()


def test_default_budget_is_the_one_that_keeps_a_gpu_fit_under_five_minutes():
    assert fit_models.DEFAULT_BUDGET_MINUTES == DEFAULT_BUDGET_MINUTES <= 4.0


@pytest.mark.parametrize("args, pattern", [
    (["--platform", "nosuch", "--all"], r"unknown platform 'nosuch'"),
    (["--platform", "v100", "--op", "conv2d"], r"no measurements of conv2d on platform v100"),
    (["--platform", "v100", "--all", "--family", "bogus"], r"bad --family 'bogus'"),
])
def test_bad_input_is_one_line(shared_data, fitted, args, pattern):
    ws, _ = fitted
    one_line_error(cli(ws.home, "fit", *args, "--no-progress"), pattern)
