"""The embedding lookup's backward (its fused SGD update) timed inside real DLRM steps, against the states pmdb prices
it from (µs).

Diagnosis for #36: on the AMD host the quickstart's DLRM world size 1 was predicted 6-15% under its truth in three
demos of three, and its backward phase (timed unprofiled, `host_op_diagnosis.py --phases`) x0.79 of its price,
the lookup's backward the largest gap in its traced iteration. Since RULES_VERSION 4 a lookup whose exact tables
were timed in a training loop of its own (the 'loop' cache state: forward on a fresh batch, its backward right
after) is priced by that. In a step other work runs between the two. Per single-rank DLRM run of a workspace (its
stored config, its own batches, one thread, pmdb's allocator settings), each round times once, alternating:

* **in the step**: a real training step; the lookup's autograd node timed by a pre- and a post-hook;
* **loop**: a fresh batch's forward, then its backward at once (gradient of ones): what the 'loop' state times;
* **loop, L2 evicted between**: as loop, with a buffer of 4x the core's L2 read between the two;
* **loop, caches flushed between**: as loop, with pmdb's stream flush between (`collectors.ops.timer.CacheFlusher`
  untargeted: 64 MiB or twice the LLC streamed, then the dispatch path re-warmed);
* **loop, the step's other work between**: as loop, with the rest of the step between them, its forward and its
  backward on the lookup's output detached (the MLPs' GEMMs, the interaction, the loss);

beside the price the prediction gave it (the exported timeline) and the stored sweep medians of its exact tables
(warm, cold, loop). Diagnosis only: nothing is fitted on it and no prediction rule is chosen by it.

    .venv/bin/python benchmarks/embedding_backward_in_step.py pmdb-workspace [--rounds 60] [--out FILE.md]
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from host_op_diagnosis import COMMANDS, timeline_events, trainer_of  # noqa: E402
from in_context_ops import begin, predicted_runs  # noqa: E402
from pmdb_commands import emit  # noqa: E402

STATES = ("in the step", "loop", "loop, L2 evicted between", "loop, caches flushed between",
          "loop, the step's other work between")
NODE = "SplitLookupFunction"   # the fused lookup's autograd node (fbgemm's TBE, collectors.embedding.tbe)


def predicted_backward_us(trace: dict) -> float | None:
    """The price of the lookup's backward node in one predicted iteration of the exported timeline (µs)."""
    events, _, iters = timeline_events(trace)
    prices = [float(a["predicted_us"]) for e in events if e.get("ph") == "X"
              and NODE in str((a := e.get("args") or {}).get("op", "")) and "predicted_us" in a]
    return sum(prices) / iters if prices else None


def sweep_medians(home: Path, rows: list[int], log: list[str]) -> dict[str, float]:
    """Median over the from-traces rounds of the backward rows whose tables have exactly these row counts, per
    cache state (µs)."""
    out: dict[str, list[float]] = {}
    for row in COMMANDS.sql(home, "SELECT cache_state, CAST(params AS VARCHAR) AS params, median_us FROM "
                            "op_measurements WHERE op = 'embedding_lookup' AND pass = 'bwd' AND median_us > 0 AND "
                            "skipped IS NULL", log):
        if sorted(json.loads(row["params"]).get("E") or []) == sorted(rows):
            out.setdefault(row["cache_state"], []).append(float(row["median_us"]))
    return {state: statistics.median(v) for state, v in sorted(out.items())}


def measure_run(config: dict, batch_size: int, rounds: int) -> dict[str, list[float]]:
    """Per state, the lookup's backward µs of each round."""
    import torch

    from collectors.ops.timer import CacheFlusher
    from pmdb.platform import cache_sizes

    trainer, ids = trainer_of("dlrm", config, batch_size, rounds)
    model = trainer.model
    if model.lookup is None:
        raise SystemExit("embedding_backward_in_step: the run's rank holds no table")
    stamps: dict[str, int] = {}
    embed = model.embed

    def hooked(indices: Any, offsets: Any) -> Any:
        out = embed(indices, offsets)
        out.grad_fn.register_prehook(lambda grads: stamps.__setitem__("pre", time.perf_counter_ns()))
        out.grad_fn.register_hook(lambda grads, outs: stamps.__setitem__("post", time.perf_counter_ns()))
        return out

    evict = torch.ones(cache_sizes().get("l2_bytes", 2 ** 20))   # 4x one core's L2, in float32
    flusher = CacheFlusher(evict=False)

    def rest_of_step(batch: Any, pooled: Any) -> None:
        out = model.top(model.interaction(model.bottom(batch.dense), pooled.detach()))
        trainer.loss(out, batch.labels).backward()

    def loop(batch: Any, between: Callable[[Any, Any], None] | None) -> float:
        pooled = model.lookup(batch.indices, batch.offsets)
        if between is not None:
            between(batch, pooled)
        grad = torch.ones_like(pooled)
        start = time.perf_counter_ns()
        pooled.backward(grad)
        return (time.perf_counter_ns() - start) / 1e3

    def in_step(k: int) -> float:
        model.embed = hooked
        try:
            trainer.step(k)
        finally:
            model.embed = embed
        return (stamps["post"] - stamps["pre"]) / 1e3

    runs: dict[str, Callable[[int], float]] = {
        STATES[0]: in_step,
        STATES[1]: lambda k: loop(trainer.batches[k], None),
        STATES[2]: lambda k: loop(trainer.batches[k], lambda b, p: float(evict.sum())),
        STATES[3]: lambda k: loop(trainer.batches[k], lambda b, p: flusher.flush()),
        STATES[4]: lambda k: loop(trainer.batches[k], rest_of_step),
    }
    times: dict[str, list[float]] = {state: [] for state in STATES}
    for r in range(rounds):
        k = ids[r % len(ids)]
        for state in STATES:
            times[state].append(runs[state](k))
    return times


def main() -> None:
    opts, lines = begin("embedding_backward_in_step", __doc__, "rounds", 60, "rounds per run: every state once",
                        "## The embedding lookup's backward inside the step",
                        "{rounds} rounds per run, every state once per round, alternating; medians over the rounds.")
    home = opts.workspace.resolve()
    log: list[str] = []
    for run, config, ts, trace in predicted_runs(home, log, ("dlrm",)):
        from collectors.workloads.trainers import stored_config

        cfg = stored_config("dlrm", config, int(run["batch_size"]))
        rows = [table.num_rows for table in cfg.tables]
        times = measure_run(config, int(run["batch_size"]), opts.rounds)
        price = predicted_backward_us(trace)
        sweeps = sweep_medians(home, rows, log)
        step = statistics.median(times[STATES[0]])
        lines += [f"### {run['workload']} b{run['batch_size']} (trace set {ts}, {run['platform']})", "",
                  f"Predicted: {price:.0f} µs for the lookup's backward node." if price is not None else
                  "Predicted: no price for the lookup's backward node in the timeline.",
                  "Sweep medians of its exact tables (median over the rounds): "
                  + (", ".join(f"{state} {us:.0f} µs" for state, us in sweeps.items()) or "none") + ".", "",
                  "| state | median µs (p10-p90) | x in the step |", "|---|---|---|"]
        for state in STATES:
            v = sorted(times[state])
            p10, p90 = v[len(v) // 10], v[(9 * len(v)) // 10]
            lines.append(f"| {state} | {statistics.median(v):.0f} ({p10:.0f}-{p90:.0f}) | "
                         f"x{statistics.median(v) / step:.2f} |")
        lines.append("")
        print(f"embedding_backward_in_step: {run['workload']} done ({os.getloadavg()[0]:.2f} load)", file=sys.stderr)
    if len(lines) <= 4:
        lines += ["No single-rank DLRM run with a model-mode prediction in this workspace.", ""]
    emit("\n".join(lines + log), opts.out)


if __name__ == "__main__":
    main()
