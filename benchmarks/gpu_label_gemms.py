"""Whether a labelled GPU ran its GEMMs as fast as the kernel table of the same GPU model: the GEMM nodes of NeuSight's
per-node breakdowns (``gpu_e2e/neusight_labels/<GPU>/<run>.csv.gz``) against that GPU's own table
(``gpu_kernels/neusight/<GPU>/linear.csv.gz`` and ``bmm.csv.gz``) at the same shapes.

Both sides are single-call latencies timed the same way (one call between CUDA events; see the shared data README),
on two hosts. The table's latency at a node's shape is read off the table itself, no pmdb model involved: the
``K_NEAR`` table rows nearest in (ln rows, ln reduced, ln out) (bmm: also ln batch), a least-squares plane of ln
latency over those ln sizes, evaluated at the node's shape. Its own accuracy is measured the same way on the table:
each of ``CHECK_ROWS`` seeded rows above ``CHECK_FLOORS`` floors read off the others (leave one out). A node whose
latency is under ``LARGE_FLOORS`` table floors is shown but left out of the sums, where the two hosts' per-call
leads (a few tens of µs, unknown on the label's host) would weigh more than ~5 %.

Diagnosis only: nothing is fitted on these numbers and no rule is chosen by them. A labelled run whose GEMMs ran
faster (or slower) than its GPU's table at the same shapes bounds what a predictor built on that table can reach.

    .venv/bin/python benchmarks/gpu_label_gemms.py [--shared DIR] [--out FILE.md]
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_node_diagnosis import LAYER_ZERO, kind_of  # noqa: E402
from pmdb_commands import host_line  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
GPUS = ("Tesla_V100-PCIE-32GB",)   # labelled GPUs that have their own kernel tables
K_NEAR = 24          # table rows in each local plane
CHECK_ROWS = 400     # table rows read off the others to measure the plane's own error
CHECK_FLOORS = 5.0   # ... among rows above this many table floors
LARGE_FLOORS = 8.0   # nodes summed: label latency above this many table floors (linear's floor: its 1 % quantile)
SEED = 0


# each table's sizes, in the order its rows and the nodes' ``sizes`` hold them (NeuSight's linear N is the reduced
# dimension, and its bmm multiplies [B, M, N] by [B, N, K])
DIMS = {"linear": ("rows", "red", "out"), "bmm": ("B", "M", "red", "N")}


@dataclass
class Table:
    """One kernel table: ln sizes per row (in :data:`DIMS` order) and single-call latency (µs)."""

    logs: np.ndarray
    latency_us: np.ndarray

    @property
    def floor_us(self) -> float:
        """The table's host floor: its 1 % latency quantile (µs), as the import reads it."""
        return float(np.quantile(self.latency_us, 0.01))

    def at(self, sizes: list[float], skip: int | None = None) -> tuple[float, float]:
        """(latency µs read off the table at ``sizes``, the farthest neighbour's distance in ln units)."""
        query = np.log(np.asarray(sizes, dtype=float))
        dist = np.sqrt(((self.logs - query) ** 2).sum(axis=1))
        if skip is not None:
            dist[skip] = np.inf
        near = np.argsort(dist)[:K_NEAR]
        design = np.column_stack([np.ones(near.size), self.logs[near]])
        coef = np.linalg.lstsq(design, np.log(self.latency_us[near]), rcond=None)[0]
        return float(np.exp(coef[0] + query @ coef[1:])), float(dist[near].max())

    def self_check(self) -> float:
        """GMAE (%) of the local plane on seeded table rows above CHECK_FLOORS floors, each read off the others."""
        rng = np.random.default_rng(SEED)
        above = np.flatnonzero(self.latency_us > CHECK_FLOORS * self.floor_us)
        rows = rng.choice(above, size=min(CHECK_ROWS, above.size), replace=False)
        errors = [self.at(list(np.exp(self.logs[i])), skip=int(i))[0] / self.latency_us[i] - 1 for i in rows]
        return 100 * float(np.exp(np.mean(np.log(np.abs(errors) + 4e-4))))


def load_tables(folder: Path) -> dict[str, Table]:
    """The linear and bmm tables, their sizes as :data:`DIMS` names them."""
    linear = pd.read_csv(folder / "linear.csv.gz")
    bmm = pd.read_csv(folder / "bmm.csv.gz")
    lin_sizes = np.column_stack([linear["B"] * linear["M"], linear["N"], linear["K"]]).astype(float)
    bmm_sizes = bmm[["B", "M", "N", "K"]].to_numpy(dtype=float)
    return {"linear": Table(np.log(lin_sizes), linear["Latency"].to_numpy() * 1e3),
            "bmm": Table(np.log(bmm_sizes), bmm["Latency"].to_numpy() * 1e3)}


def gemm_nodes(csv_path: Path, num_layer: int) -> list[dict]:
    """The GEMM nodes of a label's breakdown: name, table, sizes, count (num_layer for layer 0), fw latency µs."""
    nodes = pd.read_csv(csv_path)
    nodes = nodes[nodes["op"].isin(["call_module", "call_function", "call_method"])]
    out = []
    for _, row in nodes.iterrows():
        target = str(row["target"])
        shapes = ast.literal_eval(row["input_shapes"]) if isinstance(row["input_shapes"], str) else []
        count = num_layer if LAYER_ZERO.search(str(row["meta"])) else 1
        text = target.rsplit(".", 1)[-1] if row["op"] == "call_module" else target
        kind = kind_of(text)
        if "addmm" in target and len(shapes) == 3:
            (m, k), (_, n) = shapes[1], shapes[2]
            table, sizes = "linear", [m, k, n]
        elif row["op"] == "call_module" and kind == "linear (GEMM)" and len(shapes) == 1:
            out_dim = ast.literal_eval(str(row["output_shape"]))[-1]
            table, sizes = "linear", [int(np.prod(shapes[0][:-1])), shapes[0][-1], out_dim]
        elif kind == "bmm (attention)" and len(shapes) == 2 and len(shapes[0]) >= 3:
            a, b = shapes
            table, sizes = "bmm", [int(np.prod(a[:-2])), a[-2], a[-1], b[-1]]
        else:
            continue
        out.append({"name": str(row["Name"]), "table": table, "sizes": sizes, "count": count,
                    "label_us": float(row["fw_latency"]) * 1e3, "label_bw_us": float(row["bw_latency"]) * 1e3})
    return out


def backward_sizes(table: str, sizes: list[int]) -> list[list[int]]:
    """The two GEMMs of a node's backward in the table's terms: the input's gradient and the weight's (linear) or
    the second operand's (bmm), each as (rows, reduced, out) or (batch, M, reduced, N)."""
    if table == "linear":
        rows, red, out = sizes
        return [[rows, out, red], [out, rows, red]]
    batch, m, red, n = sizes
    return [[batch, m, n, red], [batch, red, m, n]]


def compare(shared: Path) -> tuple[list[dict], dict[str, dict[str, float]]]:
    """Every GEMM node of every labelled run of GPUS against its GPU's table; and per GPU and table the table's floor
    (µs) and the local plane's own GMAE (%)."""
    rows: list[dict] = []
    checks: dict[str, dict[str, float]] = {}
    labels = shared / "gpu_e2e" / "neusight_labels"
    for gpu in GPUS:
        tables = load_tables(shared / "gpu_kernels" / "neusight" / gpu)
        checks[gpu] = {name: {"floor_us": t.floor_us, "gmae": t.self_check()} for name, t in tables.items()}
        large = LARGE_FLOORS * tables["linear"].floor_us
        for csv_path in sorted((labels / gpu).glob("*.csv.gz")):
            meta = json.loads(csv_path.with_name(csv_path.name.replace(".csv.gz", ".json")).read_text())
            for node in gemm_nodes(csv_path, int(meta["num_layer"])):
                table = tables[node["table"]]
                table_us, dist = table.at(node["sizes"])
                backward = [table.at(sizes) for sizes in backward_sizes(node["table"], node["sizes"])]
                rows.append({**node, "gpu": gpu, "run": csv_path.name.replace(".csv.gz", ""), "table_us": table_us,
                             "dist": dist, "large": node["label_us"] >= large,
                             "table_bw_us": sum(us for us, _ in backward),
                             "bw_dist": max(d for _, d in backward)})
    return rows, checks


def _shape(node: dict) -> str:
    return " ".join(f"{n}={s}" for n, s in zip(DIMS[node["table"]], node["sizes"]))


def markdown(rows: list[dict], checks: dict[str, dict[str, dict[str, float]]]) -> list[str]:
    lines = ["The table's own error at reading a shape (each of up to "
             f"{CHECK_ROWS} seeded rows above {CHECK_FLOORS:g} floors read off its {K_NEAR} nearest others):", ""]
    for gpu, tables in checks.items():
        parts = [f"{name} {c['gmae']:.1f} % GMAE (floor {c['floor_us']:.0f} µs)" for name, c in tables.items()]
        lines.append(f"- {gpu}: " + "; ".join(parts))
    lines += ["", "fw: the node's forward against the table at its shape; bw: the node's backward against the table "
              "at its two backward GEMMs' shapes, summed (the table times one layout, NeuSight's; a backward runs "
              "others, and the sum counts the table host's lead twice). 'farthest ln': the farthest of the 24 table "
              "rows the reading used, in ln units of the sizes (fw / bw).", "",
              "| run | node | table | shape | x | label fw µs | table fw µs | fw ratio | label bw µs | table bw µs "
              "| bw ratio | farthest ln |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        mark = "" if r["large"] else " (small)"
        lines.append(f"| {r['run']} | {r['name']}{mark} | {r['table']} | {_shape(r)} | {r['count']} | "
                     f"{r['label_us']:.1f} | {r['table_us']:.1f} | {r['label_us'] / r['table_us']:.2f} | "
                     f"{r['label_bw_us']:.1f} | {r['table_bw_us']:.1f} | {r['label_bw_us'] / r['table_bw_us']:.2f} | "
                     f"{r['dist']:.2f} / {r['bw_dist']:.2f} |")
    lines += ["", "Per run, nodes above the size cut (layer-0 nodes x num_layer):", "",
              "| GPU | run | phase | GEMM nodes | label ms | table ms | label / table | per node lowest-median-highest |",
              "|---|---|---|---|---|---|---|---|"]
    frame = pd.DataFrame(rows)
    for (gpu, run), group in frame[frame["large"]].groupby(["gpu", "run"], sort=True):
        for phase, label_col, table_col in (("fw", "label_us", "table_us"), ("bw", "label_bw_us", "table_bw_us")):
            label = float((group[label_col] * group["count"]).sum()) / 1e3
            table = float((group[table_col] * group["count"]).sum()) / 1e3
            ratio = group[label_col] / group[table_col]
            lines.append(f"| {gpu} | {run} | {phase} | {len(group)} | {label:.1f} | {table:.1f} | {label / table:.3f} "
                         f"| {ratio.min():.2f}-{ratio.median():.2f}-{ratio.max():.2f} |")
    same = frame[frame["large"]].assign(key=frame["sizes"].map(tuple))
    spreads = [g for _, g in same.groupby(["gpu", "run", "table", "key"]) if len(g) > 1]
    if spreads:
        lines += ["", "Nodes of the same shape in the same run (the label's own node-to-node spread):", ""]
        for g in spreads:
            lat = g["label_us"]
            lines.append(f"- {g['run'].iloc[0]} {_shape(g.iloc[0])}: {', '.join(g['name'])}: "
                         f"{lat.min():.1f}-{lat.max():.1f} µs ({100 * (lat.max() / lat.min() - 1):.1f} % apart)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=SHARED, help="the shared data folder (default ../shared/data)")
    parser.add_argument("--out", type=Path, default=None, help="Markdown results file (default: print only)")
    args = parser.parse_args(argv)
    if not (args.shared / "gpu_e2e" / "neusight_labels").is_dir():
        print(f"gpu_label_gemms: {args.shared} has no gpu_e2e/neusight_labels (see --shared)", file=sys.stderr)
        return 2
    rows, checks = compare(args.shared)
    header = [f"# Labelled GEMMs against their GPU's kernel table — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
              "", f"`benchmarks/gpu_label_gemms.py` (reads the label and table files only; nothing is timed here); "
              f"read on {host_line()}, load average {os.getloadavg()[0]:.2f}.", ""]
    report = "\n".join(header + markdown(rows, checks)) + "\n"
    if args.out is not None:
        args.out.write_text(report)
    sys.stdout.write(report)
    return 0

if __name__ == "__main__":
    sys.exit(main())
