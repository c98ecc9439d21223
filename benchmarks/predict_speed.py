"""How fast is a prediction? Times ``predict_trace_set`` on an 8-rank trace set made by storing a captured 2-rank
trace pair four times under ranks 0-7 (a 'derived' trace set; the ranks run the same program, so the lockstep
engine synchronises 8 ranks at every collective).

    .venv/bin/python benchmarks/predict_speed.py --home pmdb-workspace [--trace-set ID] [--copies 4] [--repeat 5]

Reports, in this order and per mode (model, replay):

* first prediction: the first model-mode call of the process, including loading the model versions it uses
  (imports of their libraries, reading the files);
* steady state: the whole prediction again with the models already loaded (what a planner or a sharding study
  sees for every further trace set): reading the store, building the rank graphs, model calls, simulation;
* the engine alone (Algorithm 1, one + two iterations, on already-built programs);
* µs per traced op (Kineto events of the simulated iteration, all ranks) and per simulated op.

Wall times on a shared machine include waiting for the CPU; process CPU time (all threads, DuckDB's included) is
reported beside them. Target: the steady state under 1 s for ~2k traced ops per rank and 8 ranks. Writes a Markdown
table (default benchmarks/results/predict_speed_<platform>.md) and prints it.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.traces.ingest import RankTraces, ingest_trace_set  # noqa: E402
from pmdb.config import resolve_workspace  # noqa: E402
from pmdb.errors import PmdbError  # noqa: E402
from pmdb.store import Store  # noqa: E402
from simulator import semantics  # noqa: E402
from simulator.engine import simulate, steady_period  # noqa: E402
from pmdb.traces.from_store import load_graphs  # noqa: E402
from simulator.predict import predict_trace_set  # noqa: E402
from simulator.replay import replay_programs  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _source_set(store: Store, given: int | None) -> int:
    if given is not None:
        return given
    found = store.scalar("SELECT trace_set_id FROM v_trace_sets WHERE world_size = 2 AND source = 'captured' "
                         "ORDER BY created_at DESC LIMIT 1")
    if found is None:
        raise PmdbError("no captured 2-rank trace set: record one with `pmdb collect workload dlrm --world-size 2`")
    return int(found)


def derive(store: Store, source: int, copies: int, fresh: bool = False) -> int:
    """A trace set holding the source's rank files ``copies`` times, as ranks 0 .. 2*copies-1 (the latest one
    made earlier by this benchmark unless ``fresh``)."""
    label = f"benchmark: trace set {source} x{copies}"
    if not fresh:
        found = store.scalar("SELECT max(trace_set_id) FROM v_trace_sets WHERE source = 'derived' AND label = ?",
                             [label])
        if found is not None:
            return int(found)
    files = store.query("SELECT rank, kind, path FROM v_traces WHERE trace_set_id = ? ORDER BY rank, kind", [source])
    by_rank: dict[int, dict[str, Path]] = {}
    for rank, kind, path in files.itertuples(index=False):
        by_rank.setdefault(int(rank), {})[kind] = store.workspace.home / path
    width = len(by_rank)
    info = store.query("SELECT platform, workload_id FROM v_trace_sets WHERE trace_set_id = ?", [source]).iloc[0]
    ranks = [RankTraces(r, by_rank[r % width].get("kineto"), by_rank[r % width].get("et"))
             for r in range(width * copies)]
    with store.run("trace", info["platform"], {"benchmark": "predict_speed", "source": source}) as run:
        return ingest_trace_set(store, run.run_id, info["platform"], ranks, source="derived", label=label)


def _timed(call):
    """(result, wall s, process CPU s) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def _row(what: str, walls: list[float], cpus: list[float], ops: float, traced: float, note: str = "") -> dict:
    best = min(walls)
    return {"what": what, "runs": len(walls), "wall_best_s": f"{best:.3f}",
            "wall_median_s": f"{statistics.median(walls):.3f}", "cpu_median_s": f"{statistics.median(cpus):.3f}", "us_per_traced_op": f"{best / traced * 1e6:.1f}",
            "us_per_simulated_op": f"{best / ops * 1e6:.1f}", "note": note}


def measure(store: Store, trace_set: int, modes: list[str], repeat: int) -> tuple[list[dict], dict]:
    """Rows of the result table and facts about the trace set."""
    graph = load_graphs(store, trace_set, pick="best")[0]
    iteration = graph.ranks[0].iteration
    traced = int(store.scalar("SELECT count(*) FROM trace_ops o JOIN v_traces t USING (trace_id) WHERE "
                              "t.trace_set_id = ? AND t.kind = 'kineto' AND o.iteration = ?", [trace_set, iteration]))
    simulated = sum(len(rg.ops) for rg in graph.ranks)
    facts = {"ranks": len(graph.ranks), "traced_ops": traced, "simulated_ops": simulated,
             "traced_per_rank": traced / len(graph.ranks)}
    rows = []
    for mode in modes:
        try:
            pred, wall, cpu = _timed(lambda: predict_trace_set(store, trace_set, mode=mode))
        except PmdbError as exc:
            print(f"{mode}: skipped ({exc})")
            continue
        # replay simulates every iteration; model mode one
        scale = pred.iterations
        facts[f"{mode}_predicted_ms"] = pred.predicted_us / 1e3
        rows.append(_row(f"{mode}: first prediction" + (" (loads the models)" if mode == "model" else ""),
                         [wall], [cpu], simulated * scale, traced * scale,
                         f"{len(pred.models)} model versions" if mode == "model" else f"{scale} iterations"))
        walls, cpus = [], []
        for _ in range(repeat):
            again, wall, cpu = _timed(lambda: predict_trace_set(store, trace_set, mode=mode))
            if again.predicted_us != pred.predicted_us:
                raise RuntimeError(f"{mode}: prediction changed between repetitions")
            walls.append(wall)
            cpus.append(cpu)
        rows.append(_row(f"{mode}: whole prediction, steady state", walls, cpus, simulated * scale, traced * scale,
                         f"predicted {pred.predicted_us / 1e3:.3f} ms"))
    engine = semantics.get(graph.semantics)
    programs = replay_programs(graph, graph.semantics)
    walls, cpus = [], []
    for _ in range(repeat):
        _, wall, cpu = _timed(lambda: steady_period(programs, engine, simulate(programs, engine)))
        walls.append(wall)
        cpus.append(cpu)
    rows.append(_row("engine alone (1 + 2 iterations)", walls, cpus, 3 * simulated, 3 * traced, "replay programs"))
    return rows, facts


def markdown(rows: list[dict], facts: dict, header: str) -> str:
    cols = list(rows[0])
    lines = [f"# Prediction speed on {facts['platform']}", "", header, "",
             f"Trace set {facts['trace_set']} ({facts['ranks']} ranks, derived from 2-rank trace set "
             f"{facts['source']}): {facts['traced_ops']} traced Kineto events in the simulated iteration "
             f"({facts['traced_per_rank']:.0f} per rank), {facts['simulated_ops']} simulated ops. µs per op = best "
             "wall time / ops (x iterations simulated). Wall includes waiting for a shared CPU; CPU = process time "
             "of all threads.", "",
             "| " + " | ".join(cols) + " |", "| " + " | ".join("---" for _ in cols) + " |"]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="workspace (default: $PMDB_HOME or ./pmdb-workspace)")
    parser.add_argument("--trace-set", type=int, help="2-rank trace set to copy (default: the latest captured)")
    parser.add_argument("--copies", type=int, default=4, help="copies of the pair (default 4: 8 ranks)")
    parser.add_argument("--repeat", type=int, default=5, help="timed steady-state repetitions per mode (default 5)")
    parser.add_argument("--modes", default="model,replay", help="modes to time (default model,replay; model first, "
                                                                "so that its first call includes model loading)")
    parser.add_argument("--fresh", action="store_true", help="store a new derived trace set even when this "
                                                             "benchmark made one of the same source before")
    parser.add_argument("--output", type=Path, help="report file (default "
                                                    "benchmarks/results/predict_speed_<platform>.md)")
    args = parser.parse_args()
    started = datetime.now()
    with Store.open(resolve_workspace(args.home)) as store:
        source = _source_set(store, args.trace_set)
        derived = derive(store, source, args.copies, args.fresh)
        rows, facts = measure(store, derived, [m.strip() for m in args.modes.split(",") if m.strip()], args.repeat)
        facts.update(trace_set=derived, source=source,
                     platform=store.scalar("SELECT platform FROM v_trace_sets WHERE trace_set_id = ?", [derived]))
    text = markdown(rows, facts, f"{started:%Y-%m-%d %H:%M}, workspace {resolve_workspace(args.home).home}, "
                                 f"`benchmarks/predict_speed.py --repeat {args.repeat}`")
    output = args.output or RESULTS / f"predict_speed_{facts['platform']}.md"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(text)
    print(text)
    print(f"written to {output}")


if __name__ == "__main__":
    main()
