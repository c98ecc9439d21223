"""GPT-2 large on 4 A100-SXM4-40GB (data, tensor and pipeline parallel) predicted from one GPU's shape-only capture,
against NeuSight's measured multi-GPU steps, with the analytical planner (`pmdb plan validate`) beside it.

From an empty workspace, every step an ordinary pmdb command (printed as it runs):

1. the spec sheets registered; the A100-PCIE-40GB's NeuSight kernel tables imported and fitted (`pmdb fit --all`);
   vTrain's nccl-tests all-reduce tables (A100 SXM4, 2-8 GPUs) imported onto the same platform and fitted
   (sigmoid curves). Kernel models see kernel tables only, never the three labels.
2. GPT-2 large captured shape-only on this CPU (global batch 4, seq 1024, fp32);
3. `pmdb predict --what-if --data-parallel 4` / `--tensor-parallel 4` / `--pipeline-parallel 4` (one micro-batch)
   on the A100, each also with `--megatron-fusions` (an estimate of what Megatron's fused kernels save);
4. `pmdb plan validate` of the same three runs (shipped a100-40gb system, Megatron-DeepSpeed preset, no
   recomputation), and what-ifs to 8 and 64 GPUs timed;
5. the table: label, pmdb, error, fused, planner, which collective models priced each.

    .venv/bin/python benchmarks/multi_gpu_accuracy.py [--shared ../shared/data] [--workspace DIR] [--out FILE]
"""
from __future__ import annotations

import csv
import json
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from pmdb_commands import Commands, workspace_parser  # noqa: E402
TARGET = "nvidia-a100-pcie-40gb"     # its tables stand in for the SXM4 (same GA100 chip, clocks, SMs and HBM)
LABEL_DIR = "NVIDIA_A100-SXM4-40GB"
RUNS = {"dp4": ("--data-parallel", "4"), "tp4": ("--tensor-parallel", "4"), "pp4_1": ("--pipeline-parallel", "4")}
SPLITS = {"dp4": (1, 4, 1), "tp4": (4, 1, 1), "pp4_1": (1, 1, 4)}    # (tensor, data, pipeline)
TARGET_PCT = 10.0
HOST = "Intel Xeon, 2 cores, L3 480 MiB (lscpu), loaded by parallel work"


_COMMANDS = Commands("multi_gpu_accuracy")
pmdb = _COMMANDS.run


def _json(text: str) -> list[dict]:
    start = text.index("[")
    return json.loads(text[start:text.rindex("]") + 1])


def predict(home: Path, trace_set: int, args: tuple[str, ...], log: list[str]) -> tuple[dict, str, float]:
    t0 = time.perf_counter()
    out = pmdb(home, "predict", "--what-if", "--trace-set", str(trace_set), "--target-platform", TARGET, *args,
               "--format", "json", log=log)
    found: list[str] = []
    for line in out.splitlines():            # a note and its indented continuation lines
        if line.startswith("pmdb: note: "):
            found.append(line[len("pmdb: note: "):].strip())
        elif found and line.startswith("  ") and not line.strip().startswith('"'):
            found[-1] += " " + line.strip()
    notes = "\n".join(found)
    return _json(out)[0], notes, time.perf_counter() - t0


def fp32_system(home: Path) -> Path:
    """The shipped a100-40gb system with every matrix rate set to its FP32 rate (19.5 TFLOP/s): the labels ran
    fp32 GEMMs on CUDA cores (TF32 off), which the planner's fp16 presets do not describe. Bytes stay 2 per value."""
    data = json.loads((ROOT / "planner" / "systems" / "a100-40gb.json").read_text())
    data["name"] = "a100-40gb-fp32-rate"
    data["description"] += "; matrix rates set to the FP32 rate (benchmarks/multi_gpu_accuracy.py)"
    data["matrix_tflops"] = {k: data["matrix_tflops"]["fp32"] for k in data["matrix_tflops"]}
    path = home.parent / "a100-40gb-fp32-rate.json"
    path.write_text(json.dumps(data, indent=1))
    return path


def planner_rows(home: Path, labels: dict[str, float], config: dict, log: list[str],
                 system: str = "a100-40gb") -> dict[str, float]:
    """`pmdb plan validate` of the three runs: the planner's predicted iteration (ms) per run."""
    path = home.parent / "runs.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["GPUs", "global batch", "micro batch", "hidden size", "attention heads", "# layers",
                    "sequence length", "tensor parallelism", "data parallelism", "pipeline parallelism",
                    "iteration time (ms)"])
        for run, (tp, dp, pp) in SPLITS.items():
            w.writerow([4, 4, 4 // dp, config["n_embd"], config["n_head"], config["n_layer"], 1024, tp, dp, pp,
                        round(labels[run], 3)])
    out = pmdb(home, "plan", "validate", str(path), "--system", system, "--recompute", "none",
               "--vocab", str(config["vocab_size"]), "--format", "json", log=log)
    rows = _json(out)
    found = {}
    for row in rows:
        key = (int(row.get("tensor parallelism", row.get("tp", 0)) or 0),
               int(row.get("data parallelism", row.get("dp", 0)) or 0),
               int(row.get("pipeline parallelism", row.get("pp", 0)) or 0))
        pred = next((row[k] for k in ("predicted_ms", "predicted (ms)", "predicted") if k in row), None)
        for run, split in SPLITS.items():
            if split == key and pred is not None:
                found[run] = float(pred)
    if not found:
        found["raw"] = rows  # type: ignore[assignment]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = workspace_parser(__doc__, RESULTS / "multi_gpu_accuracy.md", 4.0, "the A100")
    args = parser.parse_args(argv)
    kernels = args.shared / "gpu_kernels" / "neusight"
    labels_dir = args.shared / "gpu_e2e" / "neusight_labels"
    comms = args.shared / "collectives" / "vtrain_a100_allreduce"
    for needed in (kernels / "NVIDIA_A100-PCIE-40GB", labels_dir / LABEL_DIR, comms):
        if not needed.is_dir():
            print(f"multi_gpu_accuracy: {needed} is missing (the shared data folder; see --shared)", file=sys.stderr)
            return 2
    home = args.workspace or Path(tempfile.mkdtemp(prefix="pmdb-multi-gpu-")) / "ws"
    if home.exists():
        print(f"multi_gpu_accuracy: {home} exists; give a new --workspace", file=sys.stderr)
        return 2
    labels = {run: json.loads((labels_dir / LABEL_DIR / f"gpt2_large-train-1024-4-{run}.json").read_text())
              ["e2e_latency"] for run in RUNS}
    config_path = labels_dir / "model_configs" / "gpt2_large.json"
    config = json.loads(config_path.read_text())
    log: list[str] = []
    started, load_before = time.perf_counter(), os.getloadavg()
    pmdb(home, "init", log=log)
    pmdb(home, "platform-specs", *map(str, sorted((kernels / "device_configs").glob("*.json"))), log=log)
    pmdb(home, "collect", "import-ops", str(kernels / "NVIDIA_A100-PCIE-40GB"), "--format", "neusight",
         "--platform", TARGET, log=log)
    pmdb(home, "collect", "import-comms", *map(str, sorted(comms.glob("AR_GPU*.csv"))), "--format", "nccl-tests",
         "--platform", TARGET, "--topology", "vTrain: A100 SXM4, 8 per NVSwitch node", log=log)
    pmdb(home, "fit", "--platform", TARGET, "--all", "--budget-minutes", str(args.fit_budget_minutes),
         "--no-progress", log=log)
    t0 = time.perf_counter()
    pmdb(home, "collect", "workload", "transformer", "--graph-only", "--config", str(config_path),
         "--batch-size", "4", "--seq-len", "1024", log=log)
    capture_s = time.perf_counter() - t0
    results = {}
    for run, flags in RUNS.items():
        row, notes, seconds = predict(home, 1, flags, log)
        fused, _, _ = predict(home, 1, (*flags, "--megatron-fusions"), log)
        results[run] = (row, fused, notes, seconds)
    scale = {}
    for name, flags in (("8 GPUs (dp2 tp2 pp2, 4 micro-batches)", ("--data-parallel", "2", "--tensor-parallel",
                                                                    "2", "--pipeline-parallel", "2",
                                                                    "--micro-batches", "4", "--batch-size", "16")),
                        ("64 GPUs (dp8 tp4 pp2, 8 micro-batches)", ("--data-parallel", "8", "--tensor-parallel",
                                                                     "4", "--pipeline-parallel", "2",
                                                                     "--micro-batches", "8", "--batch-size", "64"))):
        row, _, seconds = predict(home, 1, flags, log)
        scale[name] = (row, seconds)
    planner = planner_rows(home, labels, config, log)
    planner32 = planner_rows(home, labels, config, log, str(fp32_system(home)))
    report = render(labels, results, planner, planner32, scale, capture_s, log, load_before,
                    time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 0


def _vs(value: float | None, label: float) -> str:
    return "-" if value is None else f"{value:.1f} ({100 * (value - label) / label:+.1f}%)"


def render(labels: dict, results: dict, planner: dict, planner32: dict, scale: dict, capture_s: float,
           log: list[str], load_before: tuple, wall_s: float) -> str:
    """The Markdown results file."""
    when = f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    lines = [f"# GPT-2 large on 4 A100s, predicted from one GPU's graph — {when}",
             "", f"Host: {HOST}; load average before {load_before[0]:.2f} / after {os.getloadavg()[0]:.2f}; whole "
             f"benchmark {wall_s / 60:.1f} min. Ground truth: NeuSight's labels (Megatron-LM through accelerate, "
             f"global batch 4, seq 1024, fp32, forward + backward on rank 0, optimizer outside, mean of the 10 "
             f"fastest). Kernel models: the A100-PCIE-40GB's NeuSight tables, fitted here (same GA100 chip, 108 SMs, "
             f"1410 MHz, 1555 GB/s as the SXM4; the SXM4 has only a spec sheet, and cross-GPU models carry the "
             f"leave-one-GPU-out error on top); collectives: vTrain's A100 SXM4 nccl-tests all-reduce tables, "
             f"fitted (sigmoid). Nothing is fitted on the three labels.", "",
             f"| run | label ms | pmdb ms | error | target < {TARGET_PCT:.0f}% | with Megatron fusions ms (error) | "
             f"bubble | planner ms (error) | planner at FP32 rate ms (error) | collectives priced by |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for run, (row, fused, _, _) in results.items():
        label = labels[run]
        err = 100 * (row["predicted_ms"] - label) / label
        ferr = 100 * (fused["predicted_ms"] - label) / label
        lines.append(f"| {run} | {label:.1f} | {row['predicted_ms']:.1f} | {err:+.1f}% | "
                     f"{'met' if abs(err) < TARGET_PCT else 'NOT met'} | {fused['predicted_ms']:.1f} ({ferr:+.1f}%) | "
                     f"{row['bubble_pct']:.0f}% | {_vs(planner.get(run), label)} | {_vs(planner32.get(run), label)} | "
                     f"{row.get('collectives') or '-'} |")
    shares = [planner[run] / labels[run] for run in results if run in planner]
    fast = f"{min(shares):.2f}-{max(shares):.2f}x" if shares else "nothing"
    gaps = [f"{run} {100 * (planner32[run] - row['predicted_ms']) / row['predicted_ms']:+.0f}%"
            for run, (row, _, _, _) in results.items() if run in planner32]
    lines += ["", "What the derivation assumes (`simulator/whatif_parallel.py`): the capture's eager `transformers` "
              "ops, cut as Megatron splits them — but Megatron's GPT runs fused kernels where the capture has "
              "several passes (scale-mask-softmax, bias-GELU, bias-dropout-add; apex's fused layer norm is priced as "
              "torch's). `--megatron-fusions` drops the passes those kernels save (each fused kernel priced as one "
              "eager pass): the column above estimates how much that matters. The label's accelerate/Megatron run "
              "also pads the vocabulary (done), and its gradient all-reduce may run after the backward rather than "
              "overlapped as DDP does (assumed overlapped, as the issue asks).", "",
              "pmdb vs the planner: the shipped planner prices Megatron-DeepSpeed's fp16 tensor-core iteration "
              "(312 TFLOP/s) with its optimizer step, the labels are fp32 forward + backward on CUDA cores "
              f"(19.5 TFLOP/s): it predicts {fast} of the label. With every matrix rate set to the FP32 rate "
              "(values still 2 bytes, optimizer still in) the planner differs from pmdb by "
              + (", ".join(gaps) or "-") + "; where beyond 10%, the reasons are the planner's fixed "
              "efficiencies (0.8 of peak for every GEMM, 0.85 of HBM) against pmdb's per-shape kernel models, "
              "its 2-byte element-wise traffic, its optimizer step, and no host launch path.", ""]
    notes = sorted({n for _, _, text, _ in results.values() for n in text.split("\n") if n})
    lines += ["Notes printed by the predictions:", "", *([f"- {n}" for n in notes] or ["- none"]), ""]
    for name, found in (("planner", planner), ("planner at FP32 rate", planner32)):
        if "raw" in found:
            lines += [f"{name} output (not matched to runs): `{json.dumps(found['raw'])[:600]}`", ""]
    lines += ["What-ifs of the same capture to more GPUs (wall time of the whole command on this host, Python "
              "start and store included):", ""]
    lines += [f"- {name}: predicted {row['predicted_ms']:.1f} ms, {seconds:.1f} s; {row.get('collectives')}"
              for name, (row, seconds) in scale.items()]
    lines += ["", f"Shape-only capture of GPT-2 large (batch 4, seq 1024): {capture_s:.1f} s.", "",
              "Steps:", "", "| command | s |", "|---|---|", *log, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
