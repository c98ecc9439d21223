"""Every model config of the GPU labels captured shape-only and predicted on GPUs known by their spec sheet only,
as a training step and as an inference call: does each one capture, how long and how much memory does the capture
take, what does pmdb predict, which share of the work did no kernel model price, and is the step host-bound?

No ground truth here (no labels of these runs are in ../shared): this is the robustness check a user predicting a
model pmdb has no label for relies on, and the predictions stand for labels that may come later. From an empty
workspace, every step an ordinary pmdb command (printed as it runs):

1. the spec sheets and the five table GPUs' kernel tables (as `gpu_e2e_accuracy.py`), `pmdb fit cross-gpu --target`
   for each GPU of ``--gpus``, and today's host path (the H200 trace's T1-T5, the default lender);
2. for each ``model_configs/<model>.json`` (sorted) and mode (train, inference): `pmdb collect workload transformer
   --graph-only --routing inputs` at batch ``--batch-size`` and the model's longest sequence (its position table;
   512 where the config has none), ``--inference`` for the inference call;
3. `pmdb predict --target-platform` of each capture on each GPU; the table from the stored predictions.

    .venv/bin/python benchmarks/gpu_config_sweep.py [--shared ../shared/data] [--gpus a,b] [--batch-size 1]
        [--models bert,switchxl4]
"""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_e2e_accuracy import H200_TRACE, host_ms, import_tables, today_host_path, unpriced  # noqa: E402
from pmdb_commands import Commands, host_line, new_workspace, workspace_parser  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
GPUS = ("nvidia-h100-80gb-hbm3", "nvidia-a100-sxm4-40gb")   # spec sheets without tables (cross-GPU models)
DEFAULT_SEQ = 512     # a config without a position table (Switch Transformers: relative attention)
MODES = ("train", "inference")

_COMMANDS = Commands("gpu_config_sweep")
pmdb, sql = _COMMANDS.run, _COMMANDS.sql


def sequence_of(config: dict) -> int:
    """The model's longest sequence: its position table (``n_positions`` / ``max_position_embeddings``), else
    :data:`DEFAULT_SEQ`."""
    positions = config.get("n_positions") or config.get("max_position_embeddings")
    return int(positions) if isinstance(positions, int) and positions > 0 else DEFAULT_SEQ


def capture_facts(output: str) -> dict[str, str]:
    """The capture's field/value rows (`pmdb collect workload --graph-only` prints them) as a dict."""
    facts = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ("trace_set_id", "parameters", "capture_s", "peak_rss_mib", "head"):
            facts[parts[0]] = parts[1]
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = workspace_parser(__doc__, RESULTS / "gpu_config_sweep.md", None)
    parser.add_argument("--gpus", default=",".join(GPUS), help="platforms of spec sheets without tables, comma-"
                                                                "separated (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=1, help="batch of every capture (default 1)")
    parser.add_argument("--models", default=None, help="only these configs (file stems, comma-separated; default: "
                                                       "every model_configs/*.json)")
    parser.add_argument("--cross-gpu-max-rows", type=int, default=3000,
                        help="rows per source GPU and op for the cross-GPU models (a seeded sample)")
    args = parser.parse_args(argv)
    kernels = args.shared / "gpu_kernels" / "neusight"
    configs = args.shared / "gpu_e2e" / "neusight_labels" / "model_configs"
    gpus = [g.strip() for g in args.gpus.split(",") if g.strip()]
    home = new_workspace("gpu_config_sweep", args.workspace, "pmdb-gpu-sweep-",
                         folders=(kernels / "device_configs", configs, args.shared / H200_TRACE))
    if home is None:
        return 2
    log: list[str] = []
    started, load_before = time.perf_counter(), os.getloadavg()
    import_tables(home, kernels, log)
    for gpu in gpus:
        pmdb(home, "fit", "cross-gpu", "--target", gpu, "--max-rows", str(args.cross_gpu_max_rows), "--no-progress",
             log=log)
    today_host_path(home, args.shared, log)
    runs = []
    wanted = {m.strip() for m in args.models.split(",")} if args.models else None
    paths = [p for p in sorted(configs.glob("*.json")) if wanted is None or p.stem in wanted]
    if wanted and len(paths) != len(wanted):
        print(f"gpu_config_sweep: no config for {', '.join(sorted(wanted - {p.stem for p in paths}))} in {configs}",
              file=sys.stderr)
        return 2
    for path in paths:
        seq = sequence_of(json.loads(path.read_text()))
        for mode in MODES:
            try:
                out = pmdb(home, "collect", "workload", "transformer", "--graph-only", "--config", str(path),
                           "--batch-size", str(args.batch_size), "--seq-len", str(seq), "--routing", "inputs",
                           *(["--inference"] if mode == "inference" else []), log=log)
            except SystemExit as failed:   # a config that does not capture is this benchmark's finding: go on
                runs.append({"model": path.stem, "mode": mode, "seq": seq, "failed": str(failed).splitlines()[-1]})
                continue
            facts = capture_facts(out)
            for gpu in gpus:
                pmdb(home, "predict", "--trace-set", facts["trace_set_id"], "--target-platform", gpu, log=log)
            runs.append({"model": path.stem, "mode": mode, "seq": seq, **facts,
                         "routed": "mixture-of-experts layers" in out})
    rows = sql(home, "SELECT trace_set_id, target_platform AS gpu, predicted_us, device_active_us, "
                     "CAST(per_rank AS VARCHAR) AS per_rank, CAST(unmodelled AS VARCHAR) AS unmodelled "
                     "FROM predictions WHERE mode = 'model' ORDER BY prediction_id", log)
    report = render(runs, rows, gpus, args.batch_size, log, load_before, time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 0


def _cell(row: dict | None) -> str:
    """One GPU's prediction: step ms, 'host' where the host path is the longer, roofline share, unpriced ops."""
    if row is None:
        return "-"
    host = host_ms(row.get("per_rank"))
    bound = " host" if host is not None and host * 1e3 > (row["device_active_us"] or 0.0) else ""
    roof, none = unpriced(row["unmodelled"])
    return f"{row['predicted_us'] / 1e3:.1f}{bound} ({roof:.1f}%, {none})"


def render(runs: list[dict], rows: list[dict], gpus: list[str], batch: int, log: list[str], load_before: tuple,
           wall_s: float) -> str:
    """The Markdown results file."""
    latest = {(int(r["trace_set_id"]), r["gpu"]): r for r in rows}
    lines = [f"# Every labelled model config on spec-only GPUs — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Machine: {host_line()}, load average before {load_before[0]:.2f} / after {os.getloadavg()[0]:.2f}; "
             f"whole benchmark {wall_s / 60:.1f} min. Batch {batch}, each model's longest sequence; "
             f"mixture-of-experts layers routed as the labels' all-ones inputs route (`--routing inputs`). No "
             f"ground truth: predictions for labels that may come. A GPU's cell: predicted step ms ('host': the "
             f"host path is the longer), the share of the work priced by the roofline of the peaks, and the ops "
             f"no model priced.", "",
             "| model | mode | seq | parameters | capture s | peak MiB | " + " | ".join(gpus) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(gpus)]
    for run in runs:
        if "failed" in run:
            lines.append(f"| {run['model']} | {run['mode']} | {run['seq']} | - | failed: {run['failed'][:80]} | - | "
                         + " | ".join("-" for _ in gpus) + " |")
            continue
        set_id = int(run["trace_set_id"])
        params = f"{int(run['parameters']) / 1e9:.2f} B" if run.get("parameters") else "-"
        lines.append(f"| {run['model']}{' (MoE)' if run['routed'] else ''} | {run['mode']} | {run['seq']} | "
                     f"{params} | {run.get('capture_s', '-')} | {run.get('peak_rss_mib', '-')} | "
                     + " | ".join(_cell(latest.get((set_id, gpu))) for gpu in gpus) + " |")
    captured = [run for run in runs if "failed" not in run]
    predicted = sum(1 for run in captured for gpu in gpus if (int(run["trace_set_id"]), gpu) in latest)
    lines += ["", f"- captured: {len(captured)} of {len(runs)} (model, mode) pairs; predicted: {predicted} of "
                  f"{len(runs) * len(gpus)} on {len(gpus)} GPUs", "", "Steps:", "", "| command | s |", "|---|---|",
              *log, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
