"""Per-op diagnosis of a predicted GPU training step: pmdb's device time per node kind against NeuSight's per-node
breakdown of the same labelled run (``gpu_e2e/neusight_labels/<GPU>/<run>.csv.gz``). For diagnosis only: nothing
is fitted on these numbers and no rule is chosen by them.

The label CSV is a torch.fx graph of the model with ONE transformer layer (plus embeddings and head); each node has
its measured forward and backward latency (ms, each node timed apart, so a node with no device work still costs
~10 µs of host dispatch there). Nodes inside layer 0 count ``num_layer`` times (the label's JSON); a label with
``num_layer`` 0 traced the whole model (NeuSight's ``collect_label.py`` does so for Switch Transformers), so each
of its nodes counts once. pmdb's side is
the compute-stream events of a prediction's simulated iteration (``pmdb predict --export-trace``): each op's
predicted device time (µs) and its training phase. Both sides are grouped into the same coarse kinds (KINDS):
dropout is counted with the elementwise ops, as a captured step runs its backward as an ``aten::mul`` by the mask.

    .venv/bin/python benchmarks/gpu_node_diagnosis.py LABEL.csv.gz LABEL.json TIMELINE.json.gz
"""
from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

import pandas as pd

# kind -> words that mark it, in pmdb op names (aten::...) and in the label's fx targets, checked in this order
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("embedding", ("embedding", "wte", "wpe")),
    ("loss", ("cross_entropy", "nll_loss", "log_softmax")),
    ("layernorm", ("layer_norm", "layernorm", "ln_", "ln_f")),
    ("softmax", ("softmax",)),
    ("bmm (attention)", ("bmm", "matmul", "baddbmm")),
    ("linear (GEMM)", ("linear", "addmm", "aten::mm", "query", "key", "value", "dense", "decoder", "c_attn",
                       "c_proj", "c_fc", "lm_head", "seq_relationship")),
    ("elementwise, dropout", ("dropout", "drop", "add", "sub", "mul", "div", "truediv", "gelu", "tanh", "pow",
                              "where", "activation", "relu", "masked_fill", "rsub", "exp")),
    ("copy / reduce", ("contiguous", "copy", "clone", "cat", "sum", "ones", "full", "zeros", "fill")),
)
OTHER = "other (views, bookkeeping)"
LAYER_ZERO = re.compile(r"\.(?:layer|h)\.0'")


def kind_of(text: str) -> str:
    """The coarse kind of an op or fx node from its name or target (case-insensitive)."""
    low = text.lower()
    for kind, words in KINDS:
        if any(w in low for w in words):
            return kind
    return OTHER


def _label_text(row: pd.Series) -> str:
    """What names an fx node's work: a module's last path part, a function's name, a method's name."""
    target = str(row["target"])
    if row["op"] == "call_module":
        return target.rsplit(".", 1)[-1]
    found = re.search(r"(?:function|method) (\w+)", target)
    return found.group(1) if found else target


def label_kinds(csv_path: Path, num_layer: int) -> pd.DataFrame:
    """Label device time per (kind, phase) in ms: each node's fw/bw latency, layer-0 nodes times ``num_layer``
    (0: the CSV holds every layer, each node once)."""
    nodes = pd.read_csv(csv_path)
    nodes = nodes[nodes["op"].isin(["call_module", "call_function", "call_method"])]
    repeat = nodes["meta"].astype(str).str.contains(LAYER_ZERO).map({True: max(num_layer, 1), False: 1})
    kinds = nodes.apply(_label_text, axis=1).map(kind_of)
    frame = pd.DataFrame({"kind": kinds, "fw": nodes["fw_latency"] * repeat, "bw": nodes["bw_latency"] * repeat})
    return frame.groupby("kind")[["fw", "bw"]].sum()


def pmdb_kinds(timeline: Path) -> pd.DataFrame:
    """pmdb's predicted device time per (kind, phase) in ms, from an exported simulated iteration (compute stream;
    the loss phase is kept apart: the label's forward is the model call alone)."""
    with gzip.open(timeline, "rt") if str(timeline).endswith(".gz") else open(timeline) as handle:
        events = json.load(handle)["traceEvents"]
    rows = [(e["args"]["op"], e["args"].get("phase"), float(e["args"].get("predicted_us") or 0.0))
            for e in events if e.get("ph") == "X" and e.get("args", {}).get("stream") == "compute"]
    frame = pd.DataFrame(rows, columns=["op", "phase", "us"])
    frame["kind"] = frame["op"].map(kind_of)
    table = frame.pivot_table(index="kind", columns="phase", values="us", aggfunc="sum", fill_value=0.0) / 1e3
    return table.reindex(columns=["fw", "loss", "bw"], fill_value=0.0)


def diagnosis(label: pd.DataFrame, pmdb: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """One row per (kind, phase): label ms, pmdb ms, gap ms (pmdb - label) and its share of the label's phase;
    the ``top`` largest |gap| first. pmdb's loss phase is compared with the label's loss-free phases as 'fw'
    of kind 'loss' (the label has no loss node)."""
    rows = []
    for kind in sorted(set(label.index) | set(pmdb.index)):
        for phase in ("fw", "bw"):
            lab = float(label.loc[kind, phase]) if kind in label.index else 0.0
            ours = float(pmdb.loc[kind, phase]) if kind in pmdb.index else 0.0
            if phase == "fw" and kind in pmdb.index:
                ours += float(pmdb.loc[kind, "loss"])
            if lab or ours:
                rows.append({"kind": kind, "phase": phase, "label_ms": lab, "pmdb_ms": ours, "gap_ms": ours - lab})
    frame = pd.DataFrame(rows)
    totals = label.sum()
    frame["gap_of_phase"] = frame.apply(lambda r: r["gap_ms"] / totals[r["phase"]] if totals[r["phase"]] else 0.0,
                                        axis=1)
    return frame.reindex(frame["gap_ms"].abs().sort_values(ascending=False).index).head(top).reset_index(drop=True)


def markdown(table: pd.DataFrame, title: str) -> list[str]:
    """The diagnosis table as Markdown lines."""
    lines = [f"**{title}**", "", "| kind | phase | label ms | pmdb ms | gap ms | gap / label phase |",
             "|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        lines.append(f"| {r.kind} | {r.phase} | {r.label_ms:.1f} | {r.pmdb_ms:.1f} | {r.gap_ms:+.1f} | "
                     f"{100 * r.gap_of_phase:+.1f}% |")
    return lines + [""]


def run_diagnosis(csv_path: Path, label_json: Path, timeline: Path, title: str, top: int = 10) -> list[str]:
    """Markdown diagnosis of one labelled run against one exported prediction."""
    num_layer = int(json.loads(Path(label_json).read_text())["num_layer"])
    return markdown(diagnosis(label_kinds(csv_path, num_layer), pmdb_kinds(timeline), top), title)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="the label's per-node breakdown (.csv.gz)")
    parser.add_argument("label", type=Path, help="the label's JSON (num_layer)")
    parser.add_argument("timeline", type=Path, help="`pmdb predict --export-trace` file of the same run")
    parser.add_argument("--top", type=int, default=10, help="rows shown, largest gaps first (default 10)")
    args = parser.parse_args(argv)
    print("\n".join(run_diagnosis(args.csv, args.label, args.timeline, args.csv.name, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
