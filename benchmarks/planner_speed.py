"""Speed of the planner's search: configurations evaluated per second, per strategy, GPU count and worker count.

    .venv/bin/python benchmarks/planner_speed.py                       # GPT-3-1T on 2048 A100s, 1d/context/summa
    .venv/bin/python benchmarks/planner_speed.py --gpus 2048,16384 --workers 1,2 --strategies 1d,summa

Wall time is measured with time.perf_counter around the whole search (enumeration, evaluation, top-K merge) and
is the best of --repeat runs; the machine's load average is printed beside it (other work slows it down).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

from planner import model as models, system as systems  # noqa: E402
from planner.candidates import FRAMEWORKS  # noqa: E402
from planner.search import search  # noqa: E402


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt3-1t", help="model preset or JSON file")
    parser.add_argument("--system", default="a100", help="system name or JSON file")
    parser.add_argument("--gpus", default="2048", help="comma-separated GPU counts")
    parser.add_argument("--global-batch", type=int, default=4096, help="global batch (sequences)")
    parser.add_argument("--strategies", default="1d,context,summa", help="comma-separated strategies")
    parser.add_argument("--workers", default="1", help="comma-separated worker-process counts")
    parser.add_argument("--repeat", type=int, default=1, help="runs per setting (the fastest is reported)")
    args = parser.parse_args(argv)
    model, system = models.load(args.model), systems.load(args.system)
    fw = FRAMEWORKS["planner"]
    rows = []
    for gpus in (int(g) for g in args.gpus.split(",")):
        for strategy in args.strategies.split(","):
            for workers in (int(w) for w in args.workers.split(",")):
                runs = [search(model, system, gpus, args.global_batch, strategy=strategy, fw=fw, top=10,
                               workers=workers, progress=False) for _ in range(args.repeat)]
                best = min(runs, key=lambda r: r.elapsed_s)
                top = best.top.iloc[0] if not best.top.empty else None
                rows.append({"model": model.name, "system": system.name, "gpus": gpus, "strategy": strategy,
                             "workers": workers, "evaluated": best.evaluated, "feasible": best.feasible,
                             "wall_s": round(best.elapsed_s, 3), "configs_per_s": round(best.rate),
                             "best_time_s": None if top is None else round(float(top["time_s"]), 2),
                             "load_avg_1m": round(os.getloadavg()[0], 2)})
                print(pd.DataFrame(rows[-1:]).to_string(index=False, header=len(rows) == 1), flush=True)
    return pd.DataFrame(rows)


if __name__ == "__main__":
    main()
