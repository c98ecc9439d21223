"""GPU kernel-model accuracy on the real NeuSight tables, from an empty workspace (item 4-5 of "GPU kernel data without
a GPU"):

(a) per GPU: the `pmdb fit` families (roofline from the spec sheet, mlp, gbdt) per op, fitted on the training side of
    the seeded 80/20 split by configuration (fitters/split.py) and scored on the test side, pooled per op family;
(b) cross GPU: the cross_gpu family, leave-one-GPU-out over the GPUs with tables (trained on the others, scored on
    every row of the held-out GPU), pooled per op family.

Op families: GEMM (fully_connected = NeuSight linear, bmm), elementwise (add, mul, div, pow, their scalar and tensor
forms, gelu, relu, tanh), ln (layer_norm), softmax, conv (conv2d). The A100-PCIE-40GB has no conv table: its conv is
the A100 80GB PCIe table (its own sheet), reported as a100-80gb.

    .venv/bin/python benchmarks/gpu_kernel_accuracy.py [--shared ../shared/data] [--out FILE.md] [--seed 0]
        [--gpus v100,a100,...] [--budget-seconds 3] [--max-rows N] [--keep DIR]

Targets: per GPU (V100, A100) GEMM < 5 %, elementwise / ln / softmax < 5 %, conv < 8 %; cross GPU < 10 % for every
family. Writes the Markdown report (default benchmarks/results/gpu_kernel_accuracy.md) and prints it.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform as host
import sys
import tempfile
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

# platform name -> NeuSight folder (tables and sheet)
GPUS = {"p4": "Tesla_P4", "p100": "Tesla_P100-PCIE-16GB", "t4": "Tesla_T4", "v100": "Tesla_V100-PCIE-32GB",
        "a100": "NVIDIA_A100-PCIE-40GB", "a100-80gb": "NVIDIA_A100_80GB_PCIe"}
COMPANION = {"a100": "a100-80gb"}   # GPUs whose missing conv table another table of the same chip stands in for
FAMILIES = ("GEMM", "elementwise", "ln", "softmax", "conv")
PER_GPU_TARGET = {"GEMM": 0.05, "elementwise": 0.05, "ln": 0.05, "softmax": 0.05, "conv": 0.08}
CROSS_TARGET = 0.10
MODEL_FAMILIES = ("roofline", "mlp", "gbdt")
DEVELOPMENT_GPUS = ("p4", "p100", "t4", "v100")   # the cross-GPU features were chosen by LOGO among these only


def op_family(op: str) -> str:
    from fitters import gemm_shapes

    if op in gemm_shapes.GEMM_ALIASES:
        return "GEMM"
    if op.startswith("conv"):
        return "conv"
    if op in ("layer_norm", "softmax"):
        return {"layer_norm": "ln", "softmax": "softmax"}[op]
    return "elementwise"


def pmdb(home: Path, *args: object) -> str:
    """One pmdb command in process; raises with its stderr when it fails."""
    from pmdb.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--home", str(home), *map(str, args)])
    if code != 0:
        raise SystemExit(f"pmdb {' '.join(map(str, args))} failed ({code}): {err.getvalue().strip()}")
    return out.getvalue()


def import_all(home: Path, neusight: Path, gpus: list[str]) -> dict[str, float]:
    """Sheets and tables of ``gpus`` into the empty workspace; seconds per step."""
    seconds = {}
    pmdb(home, "init")
    for name in gpus:
        started = time.monotonic()
        pmdb(home, "platform-specs", neusight / "device_configs" / f"{GPUS[name]}.json", "--name", name)
        pmdb(home, "collect", "import-ops", neusight / GPUS[name], "--format", "neusight", "--platform", name)
        seconds[name] = time.monotonic() - started
    return seconds


def gmae(pred: list[np.ndarray], true: list[np.ndarray]) -> tuple[float, int]:
    from pmdb.metrics import gmae as _gmae

    p, t = np.concatenate(pred), np.concatenate(true)
    return _gmae(p, t), int(t.size)


def per_gpu(store, gpus: list[str], seed: int, budget_s: float, log) -> pd.DataFrame:
    """Held-out GMAE per (GPU, op family, model family) and of the per-op champion (pmdb's rule)."""
    from fitters import data
    from fitters.fit import fit_kernel_group

    rows = []
    for gpu in gpus:
        peaks = data.peaks(store, gpu)
        preds: dict[tuple[str, str], list] = defaultdict(lambda: [[], []])
        ops: dict[str, list[str]] = defaultdict(list)
        for group in data.kernel_groups(store, gpu):
            fam = op_family(group.op)
            ops[fam].append(group.op)
            truth = group.rows["median_us"].to_numpy(dtype=float)
            best = None
            for family in MODEL_FAMILIES:
                started = time.monotonic()
                model, split = fit_kernel_group(group, family, peaks, seed, budget_s)
                predicted = np.asarray(model.predict(group.params.iloc[split.test].reset_index(drop=True)))
                measured = truth[split.test]
                preds[(fam, family)][0].append(predicted)
                preds[(fam, family)][1].append(measured)
                score = gmae([predicted], [measured])[0]
                log(f"{gpu} {group.op} {family}: test GMAE {100 * score:.2f}% "
                    f"({split.train.size} train / {split.test.size} test, {time.monotonic() - started:.1f} s)")
                if best is None or score < best[0]:
                    best = (score, predicted, measured)
            preds[(fam, "champion")][0].append(best[1])
            preds[(fam, "champion")][1].append(best[2])
        for fam in FAMILIES:
            if not ops.get(fam):
                continue
            row = {"gpu": gpu, "family": fam, "ops": ", ".join(sorted(ops[fam]))}
            for family in (*MODEL_FAMILIES, "champion"):
                row[family], row["n_test"] = gmae(*preds[(fam, family)])
            rows.append(row)
    return pd.DataFrame(rows)


def cross_gpu(store, gpus: list[str], seed: int, max_rows: int | None, log) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Leave-one-GPU-out GMAE per (op family, held-out GPU) over ``gpus``; and the rows used per op."""
    from fitters import cross_gpu as cg

    ops = sorted(set(cg.gpus_with_tables(store).query("platform in @gpus")["op"]))
    preds: dict[tuple[str, str], list] = defaultdict(lambda: [[], []])
    used = []
    for op in ops:
        started = time.monotonic()
        data = cg.load_data(store, op, gpus).sample(max_rows, seed)
        if len(set(data.gpu)) < 3:
            log(f"cross-GPU {op}: tables on {len(set(data.gpu))} GPUs, skipped")
            continue
        out: dict = {}
        result = cg.leave_one_gpu_out(data, seed, predictions=out)
        for gpu, (predicted, measured) in out.items():
            label = "a100" if gpu in COMPANION.values() else gpu    # A100 80GB's conv stands for the A100's
            preds[(op_family(op), label)][0].append(predicted)
            preds[(op_family(op), label)][1].append(measured)
        used.append({"op": op, "family": op_family(op), "gpus": ", ".join(sorted(set(data.gpu))),
                     "rows": len(data), **{f"{g}_gmae": r["gmae"] for g, r in result.items()}})
        log(f"cross-GPU {op}: " + ", ".join(f"{g} {100 * r['gmae']:.1f}%" for g, r in result.items())
            + f" ({len(data)} rows, {time.monotonic() - started:.1f} s)")
    rows = []
    for (fam, gpu), (p, t) in preds.items():
        value, n = gmae(p, t)
        rows.append({"family": fam, "held_out": gpu, "gmae": value, "n": n})
    return pd.DataFrame(rows), pd.DataFrame(used)


def md_table(frame: pd.DataFrame) -> str:
    """A Markdown table (pandas' to_markdown needs the optional tabulate package)."""
    head = "| " + " | ".join(map(str, frame.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in frame.columns) + " |"
    body = ["| " + " | ".join("" if v is None else str(v) for v in row) + " |"
            for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *body])


def pct(value: float) -> str:
    return "–" if value is None or value != value else f"{100 * value:.2f}"


def markdown(args, machine: dict, timing: dict, counts: pd.DataFrame, a: pd.DataFrame, b: pd.DataFrame,
             used: pd.DataFrame) -> str:
    lines = ["# GPU kernel-model accuracy (NeuSight tables)", "",
             f"{machine['date']}; machine: {machine['host']}, `nproc` = {machine['nproc']}, load average "
             f"{machine['load_start']} at start, {machine['load_end']} at the end (other work shared the machine); "
             f"seed {args.seed}; learned-family budget {args.budget_seconds:g} s per op and family; "
             f"total {timing['total']:.0f} s (import {timing['import']:.0f} s, per-GPU fits {timing['per_gpu']:.0f} s, "
             f"leave-one-GPU-out {timing['cross']:.0f} s).", "",
             f"`{' '.join(machine['argv'])}`, from an empty workspace: the sheets of "
             f"{', '.join(args.gpus)} and their tables imported with `pmdb platform-specs` and "
             "`pmdb collect import-ops --format neusight`. GMAE = exp(mean(ln(|e| + 4e-4))), "
             "e = (predicted - measured) / measured, pooled over every test row of the family's ops.", "",
             "## Rows imported", "", md_table(counts), ""]
    lines += ["## (a) Per GPU: held-out GMAE % (seeded 80/20 split by configuration)", "",
              "Each op's roofline (the sheet's FP32 rate and bandwidth, t0 and efficiencies calibrated on the "
              "training side), mlp and gbdt (hyperparameters searched on a validation part of the training side) "
              "are fitted exactly as `pmdb fit` does (`fitters.fit.fit_kernel_group`) and scored on the test side, "
              "which no fit or choice saw. `champion` takes per op the family with the lowest test GMAE, which is "
              "pmdb's champion rule; it is a choice among three made on the test side (mildly optimistic), so the "
              "single families are shown too. Target check on the champion; `gbdt` alone gives the same verdict "
              "where marked.", ""]
    table = []
    for row in a.itertuples(index=False):
        target = PER_GPU_TARGET[row.family]
        met = row.champion < target
        table.append({"gpu": row.gpu, "family": row.family, "n_test": row.n_test, "roofline": pct(row.roofline),
                      "mlp": pct(row.mlp), "gbdt": pct(row.gbdt), "champion": pct(row.champion),
                      "target": f"< {100 * target:g}", "met": ("yes" if met else "**no**")
                      + (" (gbdt too)" if (row.gbdt < target) == met else ""), "ops": row.ops})
    lines += [md_table(pd.DataFrame(table)), ""]
    lines += ["## (b) Cross GPU: leave-one-GPU-out GMAE % per op family", "",
              f"For each op, the cross_gpu model (utilisation under the wave roofline, `fitters/cross_gpu.py`, fixed "
              f"hyperparameters) is trained on every other GPU's rows and scored on all rows of the held-out GPU. "
              f"Target < {100 * CROSS_TARGET:g} % for every family. The features were chosen looking at "
              f"leave-one-GPU-out among {', '.join(DEVELOPMENT_GPUS)} only; the A100 was held back, but its numbers "
              f"were seen once, in the run before the floor feature (see History), so they are no longer untouched.",
              ""]
    if not b.empty:
        wide = b.pivot(index="family", columns="held_out", values="gmae")
        order = [g for g in ("p4", "p100", "t4", "v100", "a100") if g in wide.columns]
        wide = wide[order]
        shown = wide.map(pct)
        shown["mean"] = wide.mean(axis=1).map(pct)
        shown["worst"] = wide.max(axis=1).map(pct)
        shown["target"] = f"< {100 * CROSS_TARGET:g}"
        shown["met (every GPU)"] = ["yes" if (wide.loc[f].dropna() < CROSS_TARGET).all() else "**no**"
                                    for f in wide.index]
        shown = shown.reindex([f for f in FAMILIES if f in shown.index])
        lines += [md_table(shown.reset_index()), "",
                  "The `a100` conv column is the A100 80GB PCIe table (the A100-PCIE-40GB has no conv table). "
                  "Rows per op (after the optional `--max-rows` sample per GPU):", "",
                  md_table(used[["op", "family", "gpus", "rows"]]), ""]
    lines += ["## Reading the numbers", "", *[f"- {note}" for note in NOTES], ""]
    lines += ["## History", "", *[f"- {note}" for note in HISTORY], ""]
    return "\n".join(lines)


NOTES = [
    "Per GPU, element-wise, ln and softmax are far inside the 5 % target (0.4-2.2 % champion GMAE): the tables' "
    "small kernels sit on a fixed floor (25-55 us of launch and timing overhead per kernel) and the large ones on "
    "the memory bandwidth, both of which one GPU's own rows pin down. GEMM meets it on every GPU but the T4 "
    "(5.3 %). conv misses its 8 % on four of five GPUs (7.6-12.5 %; V100 8.3 %): cuDNN picks Winograd, FFT or "
    "implicit-GEMM kernels per shape, a discrete choice the features see only through the sizes. Implicit-GEMM "
    "features for conv (output size, GEMM rows and reduction), tried on a validation part of the training side "
    "only, moved V100 from 9.13 to 8.55 % and P100 from 12.35 to 12.46 % and were not adopted.",
    "Across GPUs, what transfers is the utilisation of large kernels; what does not is (1) the floor of small "
    "kernels, set by the host, driver and timer rather than by anything on the spec sheet (the minimum add latency is "
    "25.0 us on T4, 25.6 on P4, 25.8 on A100, 31.8 on V100, 40.9 on P100; an unseen GPU is given the training GPUs' "
    "median, so P100's element-wise and softmax rows, mostly at its floor, stay 25-36 % off), and (2) the fraction "
    "of the nominal peaks a GPU attains: the largest FP32 GEMMs reach ~0.83 of SingleFLOPs on A100, ~0.7 on V100, "
    "~0.5 on P100, ~0.2 on T4 and ~0.13 on P4 (the 70/75 W cards cannot hold the boost clock the sheet's FLOP/s "
    "assume), and large element-wise kernels 0.90 of Mem_Bw on V100 against 0.70-0.84 elsewhere. A GPU outside the "
    "others' range on either count is mispriced by about that difference; five GPUs are too few to learn these from "
    "sheet figures, and the sheets carry no power limits or sustained clocks. No family meets the 10 % target on "
    "every GPU; the best-transferring GPUs are the T4 and P4 (2-9 % outside GEMM and conv), the worst the P100 "
    "(floor), the V100 (conv, ln) and the GEMMs of P4 and V100 (~20 %).",
    "The per-GPU split is by configuration within one GPU (its test rows are unseen shapes of a seen GPU); the "
    "cross-GPU numbers are for a GPU the model never saw, which is what `pmdb fit cross-gpu --target NAME` registers "
    "for a spec-only GPU (there, its test metric is this leave-one-GPU-out mean over the sources).",
]


HISTORY = [
    "2026-11-25 08:14, the same command with the cross_gpu model before the floor feature (features chosen on the "
    "development GPUs; A100 first looked at here). Leave-one-GPU-out GMAE % (p4 / p100 / t4 / v100 / a100): GEMM "
    "20.77 / 16.26 / 16.86 / 21.86 / 15.46; elementwise 5.52 / 23.44 / 5.28 / 19.77 / 43.40; ln 5.93 / 12.61 / 5.87 / "
    "21.69 / 8.31; softmax 6.10 / 35.27 / 6.13 / 36.39 / 62.18; conv 14.55 / 13.68 / 11.32 / 24.51 / 18.88. The A100 "
    "element-wise and softmax errors were its small kernels priced at the floor of the training GPU nearest in specs "
    "(V100, P100: 32-55 us against the A100's 26-32). The fix, the roofline over a floor feature with an unseen GPU "
    "given the training GPUs' median floor, was chosen by leave-one-GPU-out among P4, P100, T4, V100 only (mean "
    "GMAE softmax 18.5 -> 14.6 %, relu 19.3 -> 14.7 %, add 15.2 -> 11.4 %, fully_connected 25.3 -> 23.6 %, bmm "
    "18.6 -> 18.6 %), not on the A100 numbers; the per-GPU part (a) is unaffected.",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (default: ../shared/data relative to the project root)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu_kernel_accuracy.md",
                        help="Markdown report to write (default: benchmarks/results/gpu_kernel_accuracy.md)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the splits, searches and samples (default 0)")
    parser.add_argument("--gpus", default="p4,p100,t4,v100,a100",
                        help="GPUs for (a) and (b), comma-separated, of " + ", ".join(g for g in GPUS
                                                                                   if g not in COMPANION.values())
                             + " (default: all five; a100 brings the A100 80GB conv table)")
    parser.add_argument("--budget-seconds", type=float, default=3.0,
                        help="search budget of mlp and of gbdt per op and GPU in (a) (default 3)")
    parser.add_argument("--max-rows", type=int, default=None,
                        help="(b): at most this many rows per GPU and op, a seeded sample (default: all)")
    parser.add_argument("--keep", type=Path, default=None,
                        help="build the workspace in this (new) directory and keep it (default: a temporary one)")
    args = parser.parse_args()
    args.gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    unknown = [g for g in args.gpus if g not in GPUS or g in COMPANION.values()]
    if unknown or not args.gpus:
        parser.error(f"unknown GPU(s) {', '.join(unknown) or '(none given)'}: choose from "
                     f"{', '.join(g for g in GPUS if g not in COMPANION.values())}")
    neusight = args.shared / "gpu_kernels" / "neusight"
    if not neusight.is_dir():
        parser.error(f"no NeuSight tables at {neusight} (give --shared PATH)")
    if args.keep is not None and args.keep.exists():
        parser.error(f"--keep {args.keep} exists: give a new directory")
    with_companions = args.gpus + [COMPANION[g] for g in args.gpus if g in COMPANION]
    machine = {"date": datetime.now().strftime("%Y-%m-%d %H:%M"), "host": f"{host.machine()} {host.system()}",
               "nproc": os.cpu_count(), "load_start": Path("/proc/loadavg").read_text().split()[:3],
               "argv": ["benchmarks/gpu_kernel_accuracy.py", *sys.argv[1:]]}
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:6.0f} s] {message}", flush=True)

    from pmdb.config import Workspace
    from pmdb.store import Store

    with tempfile.TemporaryDirectory(prefix="gpu-accuracy-") as tmp:
        home = args.keep or Path(tmp) / "ws"
        timing = {}
        t0 = time.monotonic()
        import_all(home, neusight, with_companions)
        timing["import"] = time.monotonic() - t0
        log(f"imported {', '.join(with_companions)}")
        with Store.open(Workspace(home), read_only=True) as store:
            counts = store.query("SELECT platform AS gpu, count(*) AS rows, count(DISTINCT op) AS ops "
                                 "FROM v_op_measurements GROUP BY ALL ORDER BY platform")
            t0 = time.monotonic()
            a = per_gpu(store, with_companions, args.seed, args.budget_seconds, log)
            timing["per_gpu"] = time.monotonic() - t0
            t0 = time.monotonic()
            b, used = cross_gpu(store, with_companions, args.seed, args.max_rows, log)
            timing["cross"] = time.monotonic() - t0
    timing["total"] = time.monotonic() - started
    machine["load_end"] = Path("/proc/loadavg").read_text().split()[:3]
    machine["load_start"] = " ".join(machine["load_start"])
    machine["load_end"] = " ".join(machine["load_end"])
    report = markdown(args, machine, timing, counts, a, b, used)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
