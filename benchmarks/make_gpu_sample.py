"""Build the GPU sample shipped in ``pmdb/samples/gpu/`` (what ``pmdb quickstart``'s GPU what-if uses) from the shared
NeuSight data: the V100's spec sheet, the rows of its kernel tables that BERT-large (batch 2, sequence 512) needs,
that run's measured training step and its ``transformers`` config. Deterministic (seeded sample, gzip mtime 0):
running it again writes the same bytes.

Which rows: per op the BERT step runs (traced shapes of a shape-only capture, in pmdb's parameters; below), the
table rows inside the box [min / MARGIN, max * MARGIN] of every needed dimension (the margin doubled until the box
holds MIN_ROWS rows), then at most CAP rows of those (seeded). Rows are copied byte for byte.

    .venv/bin/python benchmarks/make_gpu_sample.py [--shared ../shared/data] [--out pmdb/samples/gpu]
"""
from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
GPU = "Tesla_V100-PCIE-32GB"
MODEL, SEQ, BATCH = "bert_large", 512, 2
MARGIN, MIN_ROWS, SEED = 4.0, 300, 0
CAP = {"linear": 1500, "bmm": 1500}   # GEMM tables; every other table keeps at most DEFAULT_CAP rows
DEFAULT_CAP = 500

# (NeuSight table, pmdb op) -> the range of each pmdb parameter BERT-large b2 s512 uses (forward GEMMs include the
# backward GEMMs priced from them), from `collectors.ops.from_traces.traced_shapes` of the capture.
NEEDED: dict[str, dict[str, tuple[float, float]]] = {
    "linear": {"M": (2, 30522), "K": (1024, 30522), "N": (2, 30522)},
    "bmm": {"B": (32, 32), "M": (64, 512), "N": (64, 512), "K": (64, 512)},
    "ln": {"M": (1024, 1024), "N": (1024, 1024)},
    "softmax": {"M": (1024, 16384), "N": (512, 30522)},
    "add": {"M": (1024, 30522), "N": (1024, 1024)},
    "mul": {"M": (1024, 16384), "N": (512, 1024)},
    "gelu": {"M": (1024, 1024), "N": (1024, 4096)},
    "tanh": {"M": (2, 2), "N": (1024, 1024)},
}


def pmdb_params(table: str, frame: pd.DataFrame) -> pd.DataFrame:
    """NeuSight's columns in pmdb's parameters (as collectors/importers/neusight.py maps them)."""
    if table == "linear":
        return pd.DataFrame({"M": frame["B"] * frame["M"], "K": frame["N"], "N": frame["K"]})
    if table == "bmm":
        return pd.DataFrame({"B": frame["B"], "M": frame["M"], "K": frame["N"], "N": frame["K"]})
    return pd.DataFrame({"M": frame["B"], "N": frame["H"]})


def select(table: str, frame: pd.DataFrame) -> np.ndarray:
    """Indices (sorted) of the rows kept."""
    params = pmdb_params(table, frame)
    margin = MARGIN
    while True:
        inside = np.ones(len(frame), bool)
        for column, (low, high) in NEEDED[table].items():
            inside &= (params[column] >= low / margin).to_numpy() & (params[column] <= high * margin).to_numpy()
        if inside.sum() >= MIN_ROWS or inside.all():
            break
        margin *= 2
    kept = np.flatnonzero(inside)
    cap = CAP.get(table, DEFAULT_CAP)
    if len(kept) > cap:
        kept = np.sort(np.random.default_rng(SEED).choice(kept, cap, replace=False))
    return kept


def write_table(source: Path, target: Path) -> tuple[int, int]:
    """Copy the kept rows of one table (header and rows byte for byte); (rows kept, rows in the source)."""
    text = gzip.decompress(source.read_bytes()).decode()
    lines = text.splitlines(keepends=True)
    frame = pd.read_csv(source)
    if len(lines) - 1 != len(frame):
        raise SystemExit(f"{source}: {len(lines) - 1} lines but {len(frame)} records (a multi-line field?)")
    kept = select(source.name.split(".")[0], frame)
    body = lines[0] + "".join(lines[1 + i] for i in kept)
    with open(target, "wb") as out, gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="") as gz:
        gz.write(body.encode())
    return len(kept), len(frame)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data", help="the shared data folder")
    parser.add_argument("--out", type=Path, default=ROOT / "pmdb" / "samples" / "gpu", help="the sample folder")
    args = parser.parse_args(argv)
    kernels = args.shared / "gpu_kernels" / "neusight"
    labels = args.shared / "gpu_e2e" / "neusight_labels"
    tables = args.out / "neusight_kernels"
    tables.mkdir(parents=True, exist_ok=True)
    for table in NEEDED:
        kept, total = write_table(kernels / GPU / f"{table}.csv.gz", tables / f"{table}.csv.gz")
        print(f"{table}: {kept} of {total} rows")
    shutil.copyfile(kernels / "device_configs" / f"{GPU}.json", args.out / f"{GPU}.json")
    shutil.copyfile(labels / GPU / f"{MODEL}-train-{SEQ}-{BATCH}.json", args.out / f"{MODEL}-train-{SEQ}-{BATCH}.json")
    shutil.copyfile(labels / "model_configs" / f"{MODEL}.json", args.out / f"{MODEL}.json")
    shutil.copyfile(kernels / "LICENSE", args.out / "LICENSE")
    size = sum(p.stat().st_size for p in args.out.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    print(f"{args.out}: {size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
