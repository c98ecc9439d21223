"""Build the lane sample shipped in ``pmdb/samples/lane_attainment/`` from the shared data: what a 128-lane SM (an
NVIDIA H200) takes over the price the cross-GPU model of the five NeuSight table GPUs (all 64-lane SMs) gives its
GEMMs. A fresh workspace registers the five sheets and imports their linear tables (the import removes each table's
host floor: device times), `fitters.cross_gpu.fit` trains the fully_connected model on every row (seed 0, no lane
correction), and the H200's GEMMs timed back to back (``gpu_kernels/h200_launch_floor.csv``, rows >= 60 µs: below,
back to back is the host's dispatch) are priced on the H200's sheet. The factor is the geometric mean of measured over
priced; leave-one-shape-out (each shape priced with the factor of the other shapes) says how well one factor holds
across shapes. No label is read. Deterministic for a given pmdb (about 30 s).

    .venv/bin/python benchmarks/make_lane_sample.py [--shared ../shared/data] [--out pmdb/samples/lane_attainment/...]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from collectors import gpu_specs  # noqa: E402
from fitters import cross_gpu  # noqa: E402
from gpu_kernel_accuracy import DEVICE_BOUND_US, parse_shape  # noqa: E402
from pmdb import metrics  # noqa: E402
from pmdb.config import Workspace  # noqa: E402
from pmdb.samples import lane_attainment  # noqa: E402
from pmdb.store import Store  # noqa: E402
from pmdb_commands import Commands  # noqa: E402

NEUSIGHT = Path("gpu_kernels") / "neusight"
TABLE_GPUS = {"tesla-p4": "Tesla_P4", "tesla-p100-pcie-16gb": "Tesla_P100-PCIE-16GB", "tesla-t4": "Tesla_T4",
              "tesla-v100-pcie-32gb": "Tesla_V100-PCIE-32GB", "nvidia-a100-pcie-40gb": "NVIDIA_A100-PCIE-40GB"}
H200_SHEET = Path("gpu_kernels") / "device_configs_extra" / "NVIDIA_H200.json"
BACK_TO_BACK = Path("gpu_kernels") / "h200_launch_floor.csv"
OPS = {"linear": "fully_connected"}   # the file's op name -> pmdb's
SEED = 0
_COMMANDS = Commands("make_lane_sample")


def gemm_params(shapes: pd.Series) -> pd.DataFrame:
    """'M=1024 K=4096 N=1024' -> columns M, K, N (K the reduction) and B = 1."""
    return pd.DataFrame([parse_shape(text) for text in shapes]).assign(B=1.0)


def priced(store: Store, op: str, params: pd.DataFrame, sheet: gpu_specs.GpuSheet) -> np.ndarray:
    """µs of ``params`` on ``sheet`` by the cross-GPU model of every table GPU's rows, without the lane correction."""
    model = cross_gpu.fit(cross_gpu.load_data(store, op, sorted(TABLE_GPUS)), SEED, lanes=False)
    features = {k: v for k, v in sheet.features().items() if k in cross_gpu.SPEC_FEATURES}
    return model.predict(params.assign(**features))


def leave_one_out(priced_us: np.ndarray, measured_us: np.ndarray) -> float:
    """GMAE % (:func:`pmdb.metrics.gmae`) of each shape priced with the factor (geometric mean of measured over
    priced) of the other shapes."""
    logs = np.log(measured_us / priced_us)
    factors = np.exp([np.delete(logs, i).mean() for i in range(len(logs))])
    return 100 * metrics.gmae(priced_us * factors, measured_us)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data", help="shared data folder")
    parser.add_argument("--out", type=Path, default=lane_attainment.TABLE, help="the sample file to write")
    args = parser.parse_args(argv)
    needed = [args.shared / H200_SHEET, args.shared / BACK_TO_BACK,
              *(args.shared / NEUSIGHT / folder / "linear.csv.gz" for folder in TABLE_GPUS.values())]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        print(f"make_lane_sample: missing {', '.join(missing)} (see --shared)", file=sys.stderr)
        return 2
    log: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pmdb-lane-sample-") as scratch:
        home = Path(scratch) / "ws"
        _COMMANDS.run(home, "init", log=log)
        for name, folder in TABLE_GPUS.items():
            _COMMANDS.run(home, "platform-specs", str(args.shared / NEUSIGHT / "device_configs" / f"{folder}.json"),
                          "--name", name, log=log)
            _COMMANDS.run(home, "collect", "import-ops", str(args.shared / NEUSIGHT / folder / "linear.csv.gz"),
                          "--format", "neusight", "--platform", name, log=log)
        sheet = gpu_specs.read_sheet(args.shared / H200_SHEET)[0]
        source_lanes = max(gpu_specs.read_sheet(args.shared / NEUSIGHT / "device_configs" / f"{folder}.json")[0]
                           .cores_per_sm for folder in TABLE_GPUS.values())
        table = pd.read_csv(args.shared / BACK_TO_BACK)
        shapes = []
        with Store.open(Workspace(home), read_only=True) as store:
            for name, op in OPS.items():
                part = table[(table["op"] == name) & (table["back_to_back_us"] >= DEVICE_BOUND_US)]
                for shape, measured, price in zip(part["shape"], part["back_to_back_us"],
                                                  priced(store, op, gemm_params(part["shape"]), sheet)):
                    shapes.append({"op": op, "shape": shape, "back_to_back_us": round(float(measured), 2),
                                   "priced_us": round(float(price), 2), "ratio": round(float(measured / price), 4)})
    ratio = np.array([s["ratio"] for s in shapes])
    priced_us, measured_us = (np.array([s[k] for s in shapes]) for k in ("priced_us", "back_to_back_us"))
    factor = float(np.exp(np.log(ratio).mean()))
    sample = lane_attainment.LaneAttainment(int(sheet.cores_per_sm), int(source_lanes), tuple(OPS.values()), round(factor, 4),
                                            "H200 GEMMs back to back, pmdb/samples/lane_attainment")
    document = {**sample.as_dict(),
                "spread": [float(ratio.min()), float(ratio.max())],
                "leave_one_shape_out_gmae_pct": round(leave_one_out(priced_us, measured_us), 2),
                "shapes": shapes,
                "provenance": {
                    "measured": f"{BACK_TO_BACK} of the shared data: an NVIDIA H200, torch 2.11, fp32 (TF32 off), "
                                f"each GEMM 50 times in a row between two CUDA events / 50, best of 5; rows >= "
                                f"{DEVICE_BOUND_US:g} us",
                    "sheet": f"{H200_SHEET} of the shared data ({sheet.sm_count} SMs x {sheet.cores_per_sm} lanes)",
                    "priced_by": "fitters.cross_gpu.fit(lanes=False), seed 0, every row of the linear tables of "
                                 + ", ".join(TABLE_GPUS) + " (NeuSight; host floor removed at import; 64-lane SMs)",
                    "made_by": "benchmarks/make_lane_sample.py",
                    "made_at": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}}
    args.out.write_text(json.dumps(document, indent=1) + "\n")
    print(f"factor x{factor:.3f} over {len(shapes)} shapes (spread {ratio.min():.2f}-{ratio.max():.2f}, "
          f"leave-one-shape-out GMAE {document['leave_one_shape_out_gmae_pct']:.1f} %): wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
