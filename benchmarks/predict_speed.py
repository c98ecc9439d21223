"""How fast is a prediction? Times ``predict_trace_set`` on an 8-rank trace set made by storing a captured 2-rank
trace pair four times under ranks 0-7 (a 'derived' trace set; the ranks run the same program, so the lockstep
engine synchronises 8 ranks at every collective).

    .venv/bin/python benchmarks/predict_speed.py --home pmdb-workspace [--trace-set ID] [--copies 4] [--repeat 3]

Reports, per mode: wall time of the whole prediction (reading the store, building the rank graphs, model calls,
simulation) and of the simulation alone, the traced ops and simulated ops per rank, and µs per simulated op.
Target: under 1 s for ~2k traced ops per rank and 8 ranks.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from collectors.traces.ingest import RankTraces, ingest_trace_set  # noqa: E402
from pmdb.config import resolve_workspace  # noqa: E402
from pmdb.errors import PmdbError  # noqa: E402
from pmdb.store import Store  # noqa: E402
from simulator import semantics  # noqa: E402
from simulator.engine import simulate, steady_period  # noqa: E402
from simulator.graph_from_store import load_graphs  # noqa: E402
from simulator.predict import predict_trace_set  # noqa: E402
from simulator.replay import replay_programs  # noqa: E402


def _source_set(store: Store, given: int | None) -> int:
    if given is not None:
        return given
    found = store.scalar("SELECT trace_set_id FROM v_trace_sets WHERE world_size = 2 AND source = 'captured' "
                         "ORDER BY created_at DESC LIMIT 1")
    if found is None:
        raise PmdbError("no captured 2-rank trace set: record one with `pmdb collect workload dlrm --world-size 2`")
    return int(found)


def derive(store: Store, source: int, copies: int) -> int:
    """A trace set holding the source's rank files ``copies`` times, as ranks 0 .. 2*copies-1."""
    files = store.query("SELECT rank, kind, path FROM v_traces WHERE trace_set_id = ? ORDER BY rank, kind", [source])
    by_rank: dict[int, dict[str, Path]] = {}
    for rank, kind, path in files.itertuples(index=False):
        by_rank.setdefault(int(rank), {})[kind] = store.workspace.home / path
    width = len(by_rank)
    info = store.query("SELECT platform, workload_id FROM v_trace_sets WHERE trace_set_id = ?", [source]).iloc[0]
    ranks = [RankTraces(r, by_rank[r % width].get("kineto"), by_rank[r % width].get("et"))
             for r in range(width * copies)]
    with store.run("trace", info["platform"], {"benchmark": "predict_speed", "source": source}) as run:
        return ingest_trace_set(store, run.run_id, info["platform"], ranks, source="derived",
                                label=f"benchmark: trace set {source} x{copies}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", help="workspace (default: $PMDB_HOME or ./pmdb-workspace)")
    parser.add_argument("--trace-set", type=int, help="2-rank trace set to copy (default: the latest captured)")
    parser.add_argument("--copies", type=int, default=4, help="copies of the pair (default 4: 8 ranks)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repetitions per mode (default 3)")
    parser.add_argument("--modes", default="replay,model", help="modes to time (default replay,model)")
    args = parser.parse_args()
    with Store.open(resolve_workspace(args.home)) as store:
        source = _source_set(store, args.trace_set)
        derived = derive(store, source, args.copies)
        traced = store.query("SELECT t.rank, count(*) AS n FROM trace_ops o JOIN v_traces t USING (trace_id) "
                             "WHERE t.trace_set_id = ? AND t.kind = 'kineto' GROUP BY t.rank", [derived])
        iterations = store.scalar("SELECT max(iterations) FROM v_traces WHERE trace_set_id = ? AND kind = 'kineto'",
                                  [derived])
        graph = load_graphs(store, derived, pick="best")[0]
        units = statistics.mean(len(rg.ops) for rg in graph.ranks)
        print(f"trace set {derived}: {len(graph.ranks)} ranks from trace set {source}; per rank "
              f"{int(traced['n'].mean())} traced events over {iterations} iterations, "
              f"{units:.0f} simulated ops per iteration")
        engine = semantics.get(graph.semantics)
        programs = replay_programs(graph, graph.semantics)
        sim = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            steady_period(programs, engine, simulate(programs, engine))
            sim.append(time.perf_counter() - start)
        ops = units * len(graph.ranks)
        print(f"engine alone (1 + 2 iterations, {len(graph.ranks)} ranks): {min(sim) * 1e3:.1f} ms "
              f"= {min(sim) / (3 * ops) * 1e6:.2f} µs per simulated op")
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            walls = []
            for _ in range(args.repeat):
                try:
                    pred = predict_trace_set(store, derived, mode=mode)
                except PmdbError as exc:
                    print(f"{mode}: skipped ({exc})")
                    break
                walls.append(pred.elapsed_s)
            if walls:
                per_op = min(walls) / (pred.iterations * ops) * 1e6
                print(f"{mode}: whole prediction {min(walls):.3f} s best, {statistics.median(walls):.3f} s median "
                      f"({pred.iterations} iteration(s) x {len(graph.ranks)} ranks; {per_op:.1f} µs per op); "
                      f"predicted {pred.predicted_us / 1e3:.3f} ms vs traced {pred.measured_us / 1e3:.3f} ms")


if __name__ == "__main__":
    main()
