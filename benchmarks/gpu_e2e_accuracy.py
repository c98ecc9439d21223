"""Predict GPU training steps without a GPU and compare them with real GPU measurements (the NeuSight labels: BERT-large
and GPT2-large on a V100 with kernel tables and on an L4 known only by its spec sheet).

From an empty workspace, every step an ordinary pmdb command (printed as it runs):

1. register the nine spec sheets; import the kernel tables of the five table GPUs;
2. fit the V100's own kernel models (`pmdb fit --platform V100 --all`) and cross-GPU models for the L4
   (`pmdb fit cross-gpu --target L4`, trained on the five table GPUs); kernel models are fitted on kernel tables
   only, never on the labels;
3. a GPU host launch path: the shared RTX 2080 Ti Kineto traces imported and their T1-T5 fitted (the labelled GPUs
   have no traces here: their predictions borrow this table, `--overheads-from`, and say so);
4. each labelled model captured shape-only on this CPU (`pmdb collect workload transformer --graph-only`), the labels
   imported (`pmdb collect import-e2e`), and each capture predicted on each GPU (`pmdb predict --target-platform`);
5. the table: per run the label's forward, backward and step, pmdb's, the errors, the published anchors on the same
   runs and the share of the predicted work that no kernel model priced.

    .venv/bin/python benchmarks/gpu_e2e_accuracy.py [--shared ../shared/data] [--workspace DIR] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PMDB = [sys.executable, "-m", "pmdb"]
V100, L4, LENDER = "tesla-v100-pcie-32gb", "nvidia-l4", "rtx2080ti"
LABEL_DIRS = {V100: "Tesla_V100-PCIE-32GB", L4: "NVIDIA_L4"}
TABLE_DIRS = ("NVIDIA_A100-PCIE-40GB", "Tesla_P100-PCIE-16GB", "Tesla_P4", "Tesla_T4", "Tesla_V100-PCIE-32GB")
TABLE_PLATFORMS = {"NVIDIA_A100-PCIE-40GB": "nvidia-a100-pcie-40gb", "Tesla_P100-PCIE-16GB": "tesla-p100-pcie-16gb",
                   "Tesla_P4": "tesla-p4", "Tesla_T4": "tesla-t4", "Tesla_V100-PCIE-32GB": V100}
RUNS = (("bert_large", 512, 2), ("bert_large", 512, 8), ("gpt2_large", 1024, 1))
# published errors on these very runs (|e| of the step, %): NeuSight (ASPLOS'25) and Habitat, as the issue quotes them
ANCHORS = {(V100, "bert_large", 2): (13.6, 3.3), (V100, "bert_large", 8): (3.1, 3.4), (V100, "gpt2_large", 1): (10.0, 9.5),
           (L4, "bert_large", 2): (3.3, None), (L4, "bert_large", 8): (15.6, None), (L4, "gpt2_large", 1): (2.8, None)}
TARGETS = {V100: 5.0, L4: 10.0}


def pmdb(home: Path, *args: str, log: list[str]) -> str:
    """Run one pmdb command in the workspace; its output (stderr included) or an error naming the command."""
    command = [*PMDB, "--home", str(home), *args]
    shown = "pmdb " + " ".join(args)
    print(f"$ {shown}", flush=True)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
    seconds = time.perf_counter() - started
    log.append(f"| `{shown[:110]}` | {seconds:.1f} |")
    if done.returncode != 0:
        raise SystemExit(f"gpu_e2e_accuracy: `{shown}` failed ({done.returncode}):\n{done.stdout[-2000:]}"
                         f"{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def sql(home: Path, query: str, log: list[str]) -> list[dict]:
    return json.loads(pmdb(home, "sql", query, "--format", "json", log=log) or "[]")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (default ../shared/data beside the project)")
    parser.add_argument("--workspace", type=Path, default=None,
                        help="workspace to build (default: a new temporary one; must not exist)")
    parser.add_argument("--out", type=Path, default=RESULTS / "gpu_e2e_accuracy.md", help="Markdown results file")
    parser.add_argument("--fit-budget-minutes", type=float, default=4.0,
                        help="time budget of `pmdb fit --platform V100 --all` (default 4)")
    parser.add_argument("--cross-gpu-max-rows", type=int, default=3000,
                        help="rows per source GPU and op for the L4's cross-GPU models (a seeded sample)")
    args = parser.parse_args(argv)
    kernels = args.shared / "gpu_kernels" / "neusight"
    labels = args.shared / "gpu_e2e" / "neusight_labels"
    traces = args.shared / "traces" / "gpu"
    for needed in (kernels / "device_configs", labels / "model_configs", traces / "param_linear"):
        if not needed.is_dir():
            print(f"gpu_e2e_accuracy: {needed} is missing (the shared data folder; see --shared)", file=sys.stderr)
            return 2
    home = args.workspace or Path(tempfile.mkdtemp(prefix="pmdb-gpu-e2e-")) / "ws"
    if home.exists():
        print(f"gpu_e2e_accuracy: {home} exists; give a new --workspace", file=sys.stderr)
        return 2
    log: list[str] = []
    started = time.perf_counter()
    load_before = os.getloadavg()
    pmdb(home, "init", log=log)
    pmdb(home, "platform-specs", *map(str, sorted((kernels / "device_configs").glob("*.json"))), log=log)
    for folder in TABLE_DIRS:
        pmdb(home, "collect", "import-ops", str(kernels / folder), "--format", "neusight",
             "--platform", TABLE_PLATFORMS[folder], log=log)
    pmdb(home, "fit", "--platform", V100, "--all", "--budget-minutes", str(args.fit_budget_minutes),
         "--no-progress", log=log)
    pmdb(home, "fit", "cross-gpu", "--target", L4, "--max-rows", str(args.cross_gpu_max_rows), "--no-progress",
         log=log)
    for name in ("param_linear", "param_resnet"):
        pmdb(home, "collect", "trace", "--kineto", str(traces / name / "kineto.json.gz"), "--et",
             str(traces / name / "et.json.gz"), "--platform", LENDER, "--workload", name, log=log)
    pmdb(home, "fit", "overheads", "--platform", LENDER, log=log)
    for platform, folder in LABEL_DIRS.items():
        files = [labels / folder / f"{model}-train-{seq}-{batch}.json" for model, seq, batch in RUNS]
        pmdb(home, "collect", "import-e2e", *map(str, files), "--format", "neusight", "--platform", platform,
             log=log)
    capture_s: dict[tuple[str, int, int], float] = {}
    for model, seq, batch in RUNS:
        t0 = time.perf_counter()
        pmdb(home, "collect", "workload", "transformer", "--graph-only", "--config",
             str(labels / "model_configs" / f"{model}.json"), "--batch-size", str(batch), "--seq-len", str(seq),
             log=log)
        capture_s[(model, seq, batch)] = time.perf_counter() - t0
    sets = sql(home, "SELECT t.trace_set_id, w.name, w.batch_size FROM v_trace_sets t JOIN workloads w "
                     "USING (workload_id) WHERE t.source = 'captured' ORDER BY t.trace_set_id", log)
    for row in sets:
        for platform in LABEL_DIRS:
            pmdb(home, "predict", "--trace-set", str(row["trace_set_id"]), "--target-platform", platform,
                 "--overheads-from", LENDER, log=log)
    results = sql(home, "SELECT e.platform, e.workload, e.batch_size, e.predicted_fw_us, e.measured_fw_us, "
                        "e.predicted_bw_us, e.measured_bw_us, e.predicted_step_us, e.measured_step_us, "
                        "e.step_rel_error, e.fw_rel_error, e.bw_rel_error, CAST(p.unmodelled AS VARCHAR) AS unmodelled "
                        "FROM v_phase_errors e JOIN predictions p USING (prediction_id) "
                        "ORDER BY e.platform DESC, e.workload, e.batch_size", log)
    report = render(results, capture_s, log, load_before, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 0


def _unpriced(unmodelled: str | None) -> tuple[float, float]:
    """(share of the predicted work priced by the roofline, share priced by nothing), in %."""
    rows = json.loads(unmodelled) if unmodelled else []
    roof = sum(r.get("predicted_share") or 0.0 for r in rows if r.get("fallback") == "roofline")
    none = sum(r.get("count") or 0 for r in rows if r.get("fallback") == "unpriced")
    return 100 * roof, none


def render(results: list[dict], capture_s: dict, log: list[str], load_before: tuple, wall_s: float) -> str:
    """The Markdown results file."""
    lines = [f"# GPU training steps predicted without a GPU — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Machine: {os.cpu_count()} cores, load average before {load_before[0]:.2f} / after "
             f"{os.getloadavg()[0]:.2f}; whole benchmark {wall_s / 60:.1f} min. Ground truth: NeuSight's labels "
             f"(fw = model call, bw = loss.backward(), step = fw + bw; mean of the 5 fastest of 25). Kernel models "
             f"fitted on the NeuSight kernel tables only (V100: its own tables; L4: cross-GPU models from the five "
             f"table GPUs and the L4's spec sheet). Host overheads borrowed from the RTX 2080 Ti traces.", "",
             "| GPU | run | label fw / bw / step ms | pmdb fw / bw / step ms | fw err | bw err | step err | "
             "NeuSight | Habitat | target | roofline-priced work | unpriced ops |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        model = next((m for m, _, b in RUNS if r["workload"] and r["workload"].startswith(m)
                      and b == int(r["batch_size"] or 0)), None)
        neusight, habitat = ANCHORS.get((r["platform"], model, int(r["batch_size"] or 0)), (None, None))
        roof, unpriced = _unpriced(r["unmodelled"])
        step = 100 * r["step_rel_error"]
        target = TARGETS.get(r["platform"])
        lines.append(
            f"| {r['platform']} | {r['workload']} b{r['batch_size']} | "
            f"{r['measured_fw_us'] / 1e3:.1f} / {r['measured_bw_us'] / 1e3:.1f} / {r['measured_step_us'] / 1e3:.1f} | "
            f"{r['predicted_fw_us'] / 1e3:.1f} / {r['predicted_bw_us'] / 1e3:.1f} / {r['predicted_step_us'] / 1e3:.1f} | "
            f"{100 * r['fw_rel_error']:+.1f}% | {100 * r['bw_rel_error']:+.1f}% | {step:+.1f}% | "
            f"{'-' if neusight is None else f'{neusight:.1f}%'} | {'-' if habitat is None else f'{habitat:.1f}%'} | "
            f"< {target:.0f}%: {'met' if target and abs(step) < target else 'NOT met'} | {roof:.1f}% | {unpriced:.0f} |")
    lines += ["", "Shape-only captures (this machine, wall time of the whole command):", ""]
    lines += [f"- {m} batch {b} seq {s}: {t:.1f} s" for (m, s, b), t in capture_s.items()]
    lines += ["", "Steps:", "", "| command | s |", "|---|---|", *log, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
