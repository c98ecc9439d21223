"""Whether a labelled GPU step is the sum of its own nodes: NeuSight's per-node latencies, summed, against the step.

Each node of a label's per-node breakdown (``gpu_e2e/neusight_labels/<GPU>/<run>.csv.gz``) was timed alone, one call
between CUDA events, so its latency holds the host's per-call floor; in the step the kernels run back to back and the
floor is not paid per node. The plain sum of a phase's nodes (layer-0 nodes times ``num_layer``, as
``gpu_node_diagnosis.py`` counts them) is therefore an upper bound on that phase's device time, were the GPU as fast
in the step as in the single calls. A phase measured slower than that sum ran slower than its own nodes: a pace no
single-call table shows (a power-limited card holding lower clocks through a sustained step, for one). Diagnosis
only: nothing is fitted on these numbers and no rule is chosen by them.

    .venv/bin/python benchmarks/gpu_label_sums.py [--labels DIR] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_node_diagnosis import LAYER_ZERO  # noqa: E402

LABELS = ROOT.parent / "shared" / "data" / "gpu_e2e" / "neusight_labels"


def node_sums(csv_path: Path, num_layer: int) -> tuple[float, float]:
    """(forward, backward) sums of a label's per-node latencies (ms), layer-0 nodes times ``num_layer``."""
    nodes = pd.read_csv(csv_path)
    nodes = nodes[nodes["op"].isin(["call_module", "call_function", "call_method"])]
    repeat = nodes["meta"].astype(str).str.contains(LAYER_ZERO).map({True: num_layer, False: 1})
    return float((nodes["fw_latency"] * repeat).sum()), float((nodes["bw_latency"] * repeat).sum())


def rows(labels: Path) -> list[dict]:
    """One row per labelled run that has a per-node breakdown: its measured phases and its nodes' sums (ms)."""
    out = []
    for csv_path in sorted(labels.glob("*/*.csv.gz")):
        meta = json.loads(csv_path.with_name(csv_path.name.replace(".csv.gz", ".json")).read_text())
        fw, bw = node_sums(csv_path, int(meta["num_layer"]))
        out.append({"gpu": csv_path.parent.name, "run": csv_path.name.replace(".csv.gz", ""),
                    "fw": float(meta["fw_latency"]), "bw": float(meta["bwall_latency"]), "fw_sum": fw, "bw_sum": bw})
    return out


def markdown(table: list[dict]) -> list[str]:
    lines = ["| GPU | run | measured fw / bw ms | nodes' sum fw / bw ms | sum over measured fw / bw |",
             "|---|---|---|---|---|"]
    for r in table:
        lines.append(f"| {r['gpu']} | {r['run']} | {r['fw']:.1f} / {r['bw']:.1f} | {r['fw_sum']:.1f} / "
                     f"{r['bw_sum']:.1f} | {r['fw_sum'] / r['fw']:.3f} / {r['bw_sum'] / r['bw']:.3f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labels", type=Path, default=LABELS, help="the NeuSight label folder (default: ../shared)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file (default: print only)")
    args = parser.parse_args(argv)
    if not args.labels.is_dir():
        print(f"gpu_label_sums: {args.labels} is missing (the shared data folder; see --labels)", file=sys.stderr)
        return 2
    table = rows(args.labels)
    text = "\n".join([f"# Labelled GPU steps against the sum of their own nodes — "
                      f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
                      "`benchmarks/gpu_label_sums.py` (reads the label files only; nothing is timed here).", "",
                      *markdown(table)]) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
