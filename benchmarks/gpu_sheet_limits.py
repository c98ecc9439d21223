"""What a GPU's spec sheet does not tell, measured on the NeuSight tables (diagnosis for #33's cross-GPU targets).

Leave-one-GPU-out GEMM error is 15-22 % on every held-out GPU (gpu_kernel_accuracy.md). Three tables here say
where it comes from; nothing pmdb fits or predicts is chosen by them.

(a) Kernel duration. For GEMMs big enough to fill the GPU (every dimension >= 512, so tiles and waves matter
little), the share of the sheet's FP32 rate a GPU attains, by how long the kernel runs. Each table row ran its
kernel 25 times with a synchronisation between calls, so a 100 ms kernel kept the GPU busy for seconds: a board that
cannot hold its clock under a sustained load (power or cooling) shows it as a falling share. A training step keeps
the GPU busy the same way. Device time as pmdb imports it (``collectors.importers.launch_floor.import_floors``).

(b) Level or shape. pmdb's cross-GPU model (``fitters.cross_gpu``) trained on every GPU but one, scored on the one
left out (a seeded sample of 3000 rows per GPU and op, as ``pmdb fit cross-gpu --max-rows 3000``): its GMAE as it
is, and again after taking out that GPU's own level (one factor per GPU and op: the geometric mean of measured over
predicted, which a sheet would have to tell). If the error stays, it is in how the GPU's time moves with the shape.

(c) Narrow GEMMs. From the same held-out bmm predictions, the median of predicted over measured per shape class:
attention's probabilities times V (output 64 wide or less, reduction >= 512), its q·k^T (reduction <= 64, output
>= 512) and GEMMs with every dimension >= 512. cuBLAS picks its kernels per GPU and shape.

    .venv/bin/python benchmarks/gpu_sheet_limits.py [--shared ../shared/data] [--out FILE.md] [--seed 0]
        [--skip-logo]
"""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from conv_kernel_choice import gmae, table_device_times  # noqa: E402
from pmdb_commands import host_line, neusight_gpus, neusight_parser  # noqa: E402

GPUS = {"p4": "Tesla_P4", "t4": "Tesla_T4", "p100": "Tesla_P100-PCIE-16GB", "v100": "Tesla_V100-PCIE-32GB",
        "a100": "NVIDIA_A100-PCIE-40GB"}
TABLES = ("linear", "bmm")
MIN_DIM = 512                # every GEMM dimension at least this (the GPU is full: shape effects are small)
EDGES_MS = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 1000.0)   # kernel duration bins (ms of device time)
MIN_ROWS = 5                 # a bin with fewer rows is shown as '-'
SHORT_MS, LONG_MS = (1.0, 3.0), (30.0, 1000.0)   # the 'held' ratio: long kernels' share over short ones'
LOGO_OPS = ("fully_connected", "bmm", "softmax", "layer_norm", "add")
LOGO_ROWS = 3000             # rows per GPU and op, a seeded sample (pmdb fit cross-gpu --max-rows 3000)
NARROW = {"output <= 64, reduction >= 512": lambda p: (p["N"] <= 64) & (p["K"] >= 512),
          "reduction <= 64, output >= 512": lambda p: (p["K"] <= 64) & (p["N"] >= 512),
          "every dimension >= 512": lambda p: (p["M"] >= 512) & (p["N"] >= 512) & (p["K"] >= 512)}


def device_times(folder: Path) -> dict[str, tuple[pd.DataFrame, np.ndarray]]:
    """The GEMM tables of one GPU folder with their device times (µs), the floor taken as pmdb's import takes it."""
    return table_device_times(folder, TABLES)


def utilisation(table: str, frame: pd.DataFrame, device_us: np.ndarray, fp32_gflops: float
                ) -> tuple[np.ndarray, np.ndarray]:
    """(share of the sheet's FP32 rate, device ms) of the rows whose GEMM has every dimension >= MIN_DIM. NeuSight's
    linear rows are B·M rows by reduced N by output K; bmm's B matrices of M by N (reduced) by K."""
    b, m, n, k = (frame[c].to_numpy(dtype=float) for c in ("B", "M", "N", "K"))
    rows = b * m if table == "linear" else m
    full = (rows >= MIN_DIM) & (n >= MIN_DIM) & (k >= MIN_DIM)
    flops = 2.0 * b * m * n * k
    share = flops / (device_us * 1e-6) / (fp32_gflops * 1e9)
    return share[full], device_us[full] / 1000.0


def by_duration(share: np.ndarray, ms: np.ndarray) -> list[tuple[float, int]]:
    """Median share and row count per duration bin of :data:`EDGES_MS` (NaN where fewer than MIN_ROWS)."""
    out = []
    for low, high in zip(EDGES_MS[:-1], EDGES_MS[1:]):
        rows = (ms >= low) & (ms < high)
        count = int(rows.sum())
        out.append((float(np.median(share[rows])) if count >= MIN_ROWS else float("nan"), count))
    return out


def held(share: np.ndarray, ms: np.ndarray) -> float:
    """Median share of the long kernels over that of the short ones (NaN where either has fewer than MIN_ROWS)."""
    short = (ms >= SHORT_MS[0]) & (ms < SHORT_MS[1])
    long_ = (ms >= LONG_MS[0]) & (ms < LONG_MS[1])
    if short.sum() < MIN_ROWS or long_.sum() < MIN_ROWS:
        return float("nan")
    return float(np.median(share[long_]) / np.median(share[short]))


def level_removed(predicted: np.ndarray, measured: np.ndarray) -> tuple[float, float, float]:
    """(GMAE %, the GPU's level: geometric mean of measured / predicted, GMAE % of the predictions times that)."""
    level = float(np.exp(np.mean(np.log(measured / predicted))))
    return gmae(predicted, measured), level, gmae(predicted * level, measured)


def narrow_ratios(params: pd.DataFrame, predicted: np.ndarray, measured: np.ndarray) -> dict[str, tuple[float, int]]:
    """Median predicted / measured and rows per :data:`NARROW` class of bmm rows (pmdb's bmm: K reduced, N out)."""
    out = {}
    for name, rule in NARROW.items():
        rows = np.asarray(rule(params), dtype=bool)
        out[name] = (float(np.median(predicted[rows] / measured[rows])) if rows.any() else float("nan"),
                     int(rows.sum()))
    return out


def held_out(home: Path, neusight: Path, gpus: list[str], seed: int, log) -> dict[str, dict]:
    """Tables and sheets of ``gpus`` imported into the empty workspace ``home`` (as gpu_kernel_accuracy does, platform
    names p4, t4, ...); per op of :data:`LOGO_OPS`, each GPU left out: {op: {gpu: (params, predicted µs, measured
    µs)}} (:func:`fitters.cross_gpu.leave_one_gpu_out`)."""
    from fitters import cross_gpu
    from gpu_kernel_accuracy import import_all
    from pmdb.config import Workspace
    from pmdb.store import Store

    log(f"importing {', '.join(gpus)}")
    import_all(home, neusight, gpus)
    out: dict[str, dict] = {}
    with Store.open(Workspace(home), read_only=True) as store:
        for op in LOGO_OPS:
            log(f"{op}: leave-one-GPU-out")
            data = cross_gpu.load_data(store, op).sample(LOGO_ROWS, seed)
            held: dict = {}
            cross_gpu.leave_one_gpu_out(data, seed, predictions=held)
            out[op] = {gpu: (data.params[data.gpu == gpu].reset_index(drop=True), *held[gpu]) for gpu in held}
    return out


def _logo_lines(found: dict[str, dict]) -> list[str]:
    gpus = sorted({g for per_gpu in found.values() for g in per_gpu}, key=list(GPUS).index)
    lines = ["", "## (b) Level or shape: leave-one-GPU-out GMAE % as it is / with the held-out GPU's own level "
             "taken out (level: measured over predicted, geometric mean)", "",
             "| op | " + " | ".join(gpus) + " |", "|---|" + "---|" * len(gpus)]
    for op, per_gpu in found.items():
        cells = []
        for gpu in gpus:
            if gpu not in per_gpu:
                cells.append("-")
                continue
            err, level, removed = level_removed(*per_gpu[gpu][1:])
            cells.append(f"{err:.1f} / {removed:.1f} (x{level:.2f})")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    if "bmm" in found:
        lines += ["", "## (c) Narrow GEMMs: held-out bmm, median predicted / measured (rows)", "",
                  "| shape class | " + " | ".join(gpus) + " |", "|---|" + "---|" * len(gpus)]
        ratios = {g: narrow_ratios(*found["bmm"][g]) for g in gpus if g in found["bmm"]}
        for name in NARROW:
            cells = [f"{ratios[g][name][0]:.2f} ({ratios[g][name][1]})" if g in ratios else "-" for g in gpus]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = neusight_parser(__doc__, GPUS, "write the tables to this Markdown file",
                             "seed of the row samples and the trees in (b), (c)")
    parser.add_argument("--skip-logo", action="store_true", help="table (a) only (no import, no fits: seconds)")
    args = parser.parse_args(argv)
    found = neusight_gpus("gpu_sheet_limits", args.shared, args.gpus, GPUS)
    if found is None:
        return 2
    base, wanted = found
    started, clock = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), time.monotonic()
    bins = [f"{lo:g}-{hi:g} ms" for lo, hi in zip(EDGES_MS[:-1], EDGES_MS[1:])]
    rows = [f"| GPU | table | sheet GFLOP/s | {' | '.join(bins)} | long / short |",
            "|---|---|---|" + "---|" * (len(bins) + 1)]
    for gpu in wanted:
        sheet = json.loads((base / "device_configs" / f"{GPUS[gpu]}.json").read_text())
        for table, (frame, device) in device_times(base / GPUS[gpu]).items():
            share, ms = utilisation(table, frame, device, float(sheet["SingleFLOPs"]))
            cells = [f"{s:.2f} ({n})" if np.isfinite(s) else "-" for s, n in by_duration(share, ms)]
            ratio = held(share, ms)
            rows.append(f"| {gpu} | {table} | {sheet['SingleFLOPs']} | {' | '.join(cells)} | "
                        f"{f'{ratio:.2f}' if np.isfinite(ratio) else '-'} |")
    logo: list[str] = []
    if not args.skip_logo:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="pmdb-sheet-limits-") as tmp:
            found = held_out(Path(tmp) / "ws", base, wanted, args.seed,
                             lambda message: print(f"gpu_sheet_limits: {message}", file=sys.stderr))
        logo = _logo_lines(found)
    text = "\n".join([f"# What a GPU's spec sheet does not tell ({started})", "",
                      f"Host (the script's CPU; the times are GPU device times): {host_line()}; load average "
                      f"{os.getloadavg()[0]:.2f} at the end; seed {args.seed}; {time.monotonic() - clock:.0f} s.",
                      "", "\n\n".join(__doc__.split("\n\n")[1:5]), "",
                      "## (a) Kernel duration: median share of the sheet's FP32 rate (rows) per device-time bin", "",
                      f"'long / short': the median share at {LONG_MS[0]:g}-{LONG_MS[1]:g} ms over that at "
                      f"{SHORT_MS[0]:g}-{SHORT_MS[1]:g} ms.", "", *rows, *logo]) + "\n"
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
