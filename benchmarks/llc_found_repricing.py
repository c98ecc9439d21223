"""The same workspace's CPU runs priced three ways: cold (the default before RULES_VERSION 6, as it still is without a
recorded LLC: cold models, embedding lookups by their training-loop timing),
reuse over the sysfs LLC (LRU, ``--cache-state reuse`` before the probes recorded the LLC found), and reuse with the
LLC the run found (:mod:`simulator.llc_found`: the run's own probes, else the platform's op sweeps'; the default
since). Diagnosis: what the measured LLC share changes, run by run, against each truth. Nothing is stored and
nothing is fitted; the errors are against the unprofiled truths the workspace holds.

    .venv/bin/python benchmarks/llc_found_repricing.py pmdb-workspace [--out FILE.md]
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from pmdb_commands import host_line  # noqa: E402

RUNS = """
SELECT w.name AS workload, w.world_size, r.run_id, r.platform, r.measured_us,
       max(t.trace_set_id) AS trace_set_id
FROM workload_runs r JOIN workloads w USING (workload_id) JOIN trace_sets t ON t.workload_id = w.workload_id
JOIN platforms pl ON pl.name = r.platform
WHERE pl.device_kind = 'cpu' AND r.measured_us IS NOT NULL AND t.source <> 'derived'
GROUP BY ALL ORDER BY w.world_size, w.name, r.run_id
"""


def price(store, run: dict, way: str) -> float:
    """Predicted µs of one run: 'cold' (the default before RULES_VERSION 6: cold models, an embedding lookup by its
    training-loop timing; what the default does without a recorded LLC), 'lru' (``--cache-state reuse`` over the
    sysfs LLC, as before the probes recorded the LLC found), 'found' (the default since: reuse in the LLC the run
    found)."""
    import simulator.session as session_mod
    from simulator.predict import predict_trace_set

    state = {"cold": None, "lru": "reuse", "found": None}[way]
    original = session_mod.run_llc_found
    if way in ("cold", "lru"):   # no LLC curve: the default is then the old cold one, reuse is LRU
        session_mod.run_llc_found = lambda *a, **k: None
    try:
        pred = predict_trace_set(store, int(run["trace_set_id"]), cache_state=state, workload_run_id=run["run_id"])
    finally:
        session_mod.run_llc_found = original
    return pred.predicted_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from pmdb.store import Store
    from pmdb.config import Workspace
    from simulator.llc_found import run_llc_found

    store = Store.open(Workspace(args.workspace.resolve()))
    runs = store.query(RUNS).to_dict("records")
    lines = [f"# reuse pricing with the LLC the run found: {args.workspace}", "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {host_line()}; load {os.getloadavg()[0]:.2f}", "",
             "| run | ws | truth ms | found (source: 16/64/256 MiB) | cold % | reuse LRU % | reuse found % |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    errors: dict[str, dict[str, list[float]]] = {}
    for run in runs:
        found = run_llc_found(store, run["run_id"], run["platform"])
        row = {}
        for way in ("cold", "lru", "found"):
            row[way] = 100 * (price(store, run, way) / run["measured_us"] - 1)
            group = "transformers" if run["workload"] in ("bert", "gpt2", "xlnet") else \
                f"{run['workload']} ws{run['world_size']}"
            errors.setdefault(group, {}).setdefault(way, []).append(row[way])
        curve = "-" if found is None else f"{found.source}: " + "/".join(f"{100 * f:.0f}" for f in found.found)
        lines.append(f"| {run['workload']} | {run['world_size']} | {run['measured_us'] / 1e3:.2f} | {curve} | "
                     f"{row['cold']:+.1f} | {row['lru']:+.1f} | {row['found']:+.1f} |")
        print(lines[-1], flush=True)
    lines += ["", "| group | runs | cold | reuse LRU | reuse found |", "| --- | --- | --- | --- | --- |"]
    for group, ways in errors.items():
        geo = {w: math.exp(statistics.fmean(math.log(abs(e) + 1e-9) for e in v)) for w, v in ways.items()}
        lines.append(f"| {group} | {len(ways['cold'])} | {geo['cold']:.1f} | {geo['lru']:.1f} | "
                     f"{geo['found']:.1f} |")
    lines.append("")
    lines.append("Geometric mean of |error| % per group (a single run: its |error|).")
    store.close()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
