"""How well `pmdb predict --what-if` predicts configurations that were never traced: record ONE configuration per
workload, derive the others from it (batch size, world size, DLRM sharding plan), predict them, then run every one of
them for real (ground truth, no profiler) and compare. Nothing else may run on the machine meanwhile.

From an empty workspace, every step an ordinary pmdb command (printed as it runs):

1. kernel microbenchmarks (`collect ops --sweep quick`, then the shapes of the recorded traces, `--from-traces`, in
   three processes), a world-size-2 gloo sweep of all_reduce and all_to_all, the platform's peaks; `fit --all`;
   `fit overheads`; `fit comms-context --target step` on two world-size-2 DLRM calibration runs (random sharding,
   which no configuration below uses; seeds 1, 2), as `pmdb quickstart` and `e2e_accuracy.sh` do;
2. the recorded configurations, traced: a tiny GPT-2 (2 layers, hidden 256, 4 heads, sequence 48) at batch 6 on one
   rank; the dlrm_ddp DLRM at batch 192 on one rank, and on two ranks with the naive plan (batches chosen so that no
   layer width equals the batch: the derivation is then exact, see simulator/whatif.py);
3. the derived configurations predicted with `pmdb predict --what-if --trace-set ID ...`: GPT-2 batch 12 and 24, and
   world size 2 (6 per rank); DLRM ws1 batch 96 and 384; DLRM ws2 plans size_greedy and lookup_greedy, and naive at
   batch 384; the recorded ones predicted from their own traces for reference (`pmdb predict --trace-set ID`);
   then (unless `--no-measure-shapes`) each derived one again with `--measure-shapes`: its op shapes the store
   lacks microbenchmarked and those ops refitted first (kernels only; the configuration itself never runs);
4. ground truth of every configuration, recorded ones included: `--rounds` interleaved rounds (the order rotates),
   each a `pmdb collect workload ... --no-trace`; a configuration's time is the median of its rounds' medians;
5. benchmarks/results/whatif_accuracy_<platform>.md: per configuration the predicted and measured times, the error,
   the spread over rounds, the error of the recorded configuration it was derived from, and the derivation's own
   error: (1 + error) / (1 + recorded config's error) - 1, what the what-if adds to the error the models already
   make on the recorded configuration (the ratio of predicted to measured scaling); the load average at start and end.

    .venv/bin/python benchmarks/whatif_accuracy.py [--workspace DIR] [--rounds 3] [--no-measure-shapes] [--out FILE]

About 10 minutes on a 2-core machine (measured: 13:29-13:39 on 2026-11-25; the Markdown lists each command's time).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from pmdb.metrics import gmae_of_abs

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from pmdb_commands import Commands  # noqa: E402
GPT2 = ["transformer", "--arch", "gpt2", "--layers", "2", "--hidden", "256", "--heads", "4", "--seq-len", "48"]
DLRM = ["dlrm", "--preset", "dlrm_ddp"]
CALIBRATION_SEEDS = (1, 2)   # world-size-2 DLRM runs, random sharding (no judged plan): the collectives' step factor
SHAPE_ROUNDS = 3             # processes the traced op shapes are measured in (`collect ops --from-traces`)


@dataclass(frozen=True)
class Config:
    """One configuration: its workload (name in the store, global batch, ranks, DLRM plan), how to run it, and
    (derived ones) the recorded configuration and the what-if arguments."""

    name: str
    workload: str                # workloads.name: the architecture or preset
    batch: int
    world: int
    sharder: str | None
    run: list[str]               # `pmdb collect workload` arguments (ground truth)
    recorded: str | None = None  # name of the recorded config it derives from (None: it is recorded)
    what_if: tuple[str, ...] = ()


def _gpt2(batch: int, world: int, recorded: str | None = None, what_if: tuple[str, ...] = ()) -> Config:
    return Config(f"gpt2 b{batch} ws{world}", "gpt2", batch, world, None,
                  [*GPT2, "--batch-size", str(batch), "--world-size", str(world), "--iters", "20"], recorded, what_if)


def _dlrm(batch: int, world: int, sharder: str | None = None, recorded: str | None = None,
          what_if: tuple[str, ...] = ()) -> Config:
    plan = [] if sharder is None else ["--sharder", sharder]
    return Config(f"dlrm b{batch} ws{world}{'' if sharder is None else f' {sharder}'}", "dlrm_ddp", batch, world,
                  sharder, [*DLRM, "--batch-size", str(batch), "--world-size", str(world), *plan], recorded, what_if)


CONFIGS = (
    _gpt2(6, 1),
    _gpt2(12, 1, "gpt2 b6 ws1", ("--batch-size", "12")),
    _gpt2(24, 1, "gpt2 b6 ws1", ("--batch-size", "24")),
    _gpt2(12, 2, "gpt2 b6 ws1", ("--world-size", "2")),
    _dlrm(192, 1),
    _dlrm(96, 1, None, "dlrm b192 ws1", ("--batch-size", "96")),
    _dlrm(384, 1, None, "dlrm b192 ws1", ("--batch-size", "384")),
    _dlrm(192, 2, "naive"),
    _dlrm(192, 2, "size_greedy", "dlrm b192 ws2 naive", ("--sharder", "size_greedy")),
    _dlrm(192, 2, "lookup_greedy", "dlrm b192 ws2 naive", ("--sharder", "lookup_greedy")),
    _dlrm(384, 2, "naive", "dlrm b192 ws2 naive", ("--batch-size", "384")),
)


_COMMANDS = Commands("whatif_accuracy", shown_chars=100)
pmdb, sql = _COMMANDS.stdout, _COMMANDS.sql


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workspace", type=Path, default=None,
                        help="workspace to build (default: a new temporary one; must not exist)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved ground-truth rounds (at least 3)")
    parser.add_argument("--measure-shapes", action=argparse.BooleanOptionalAction, default=True,
                        help="also predict each derived configuration with `--measure-shapes` (its new op shapes "
                             "microbenchmarked and their ops refitted first): one more column")
    parser.add_argument("--out", type=Path, default=None,
                        help="Markdown results (default benchmarks/results/whatif_accuracy_<platform>.md)")
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (the spread over rounds is part of the result)")
    home = args.workspace or Path(tempfile.mkdtemp(prefix="pmdb-whatif-")) / "ws"
    if home.exists():
        parser.error(f"{home} exists: give a new --workspace")
    log: list[str] = []
    started, load_before = datetime.now(timezone.utc), os.getloadavg()[0]
    pmdb(home, "init", log=log)
    recorded: dict[str, int] = {}
    for config in CONFIGS:                     # 2. the recorded configurations, traced
        if config.recorded is None:
            recorded[config.name] = _COMMANDS.capture(home, *config.run, "--trace-iters", "3", log=log)
    calibration = []                           # world-size-2 runs that only calibrate the collectives in context
    for seed in CALIBRATION_SEEDS:
        calibration += ["--trace-set", str(_COMMANDS.capture(
            home, *DLRM, "--batch-size", "192", "--world-size", "2", "--sharder", "random", "--seed", str(seed),
            "--trace-iters", "5", "--iters", "100", "--warmup", "10", "--repeats", "3", log=log))]
    pmdb(home, "collect", "peaks", log=log)    # 1. models
    pmdb(home, "collect", "ops", "--sweep", "quick", "--no-progress", log=log)
    for round_ in range(SHAPE_ROUNDS):          # the traced shapes in fresh processes: prices are their medians
        pmdb(home, "collect", "ops", "--from-traces", *(["--force"] if round_ else []), "--no-progress", log=log)
    pmdb(home, "collect", "comms", "--world-size", "2", "--ops", "all_reduce,all_to_all", "--max-bytes", "64MiB",
         "--iters", "20", "--no-progress", log=log)
    pmdb(home, "fit", "--all", "--no-progress", log=log)
    pmdb(home, "fit", "overheads", log=log)
    pmdb(home, "fit", "comms-context", "--target", "step", *calibration, log=log)
    predicted: dict[str, dict] = {}            # 3. predictions
    for config in CONFIGS:
        if config.recorded is None:
            out = pmdb(home, "predict", "--trace-set", str(recorded[config.name]), "--format", "json", log=log)
        else:
            out = pmdb(home, "predict", "--what-if", "--trace-set", str(recorded[config.recorded]), *config.what_if,
                       "--format", "json", log=log)
        predicted[config.name] = json.loads(out)[0]
    measured_shapes: dict[str, dict] = {}      # 3b. the same what-ifs with their new op shapes measured first
    if args.measure_shapes:
        for config in CONFIGS:
            if config.recorded is not None:
                out = pmdb(home, "predict", "--what-if", "--trace-set", str(recorded[config.recorded]),
                           *config.what_if, "--measure-shapes", "--format", "json", log=log)
                measured_shapes[config.name] = json.loads(out)[0]
    for round_ in range(args.rounds):          # 4. ground truth, interleaved
        order = list(CONFIGS[round_ % len(CONFIGS):]) + list(CONFIGS[:round_ % len(CONFIGS)])
        for config in order:
            pmdb(home, "collect", "workload", *config.run, "--no-trace", log=log)
    runs = sql(home, "SELECT w.name, w.batch_size, w.world_size, w.sharder, r.measured_us FROM v_workload_runs r "
                     "JOIN workloads w USING (workload_id) ORDER BY r.finished_at", log)
    platform = sql(home, "SELECT platform FROM v_workload_runs LIMIT 1", log)[0]["platform"]
    ended, load_after = datetime.now(timezone.utc), os.getloadavg()[0]
    lines = [f"# What-if accuracy on {platform}", "",
             f"{started:%Y-%m-%d %H:%M}–{ended:%H:%M} UTC, {os.cpu_count()} cores, load average {load_before:.2f} at "
             f"start and {load_after:.2f} at the end (the benchmark's own processes included), "
             f"`benchmarks/whatif_accuracy.py` from an empty workspace, "
             f"{args.rounds} interleaved ground-truth rounds. One configuration per workload was traced (plus "
             f"{len(CALIBRATION_SEEDS)} world-size-2 DLRM runs with random sharding that only calibrate the "
             f"collectives' step factor); the others "
             f"were derived from it (`pmdb predict --what-if`) and run only for ground truth. *spread*: (max - min) / "
             f"median of its ground-truth runs; *derivation*: (1 + error) / (1 + recorded config's error) - 1, the "
             f"error the what-if adds to the one the models make on the recorded configuration.", "",
             "| configuration | derived from | predicted ms | measured ms | error | spread | recorded config's error "
             "| derivation | shapes measured: predicted ms | error |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    with_shapes: dict[str, float] = {}
    added: dict[str, float] = {}
    errors = {}
    for config in CONFIGS:
        times = [r["measured_us"] for r in runs if r["name"] == config.workload and r["batch_size"] == config.batch
                 and r["world_size"] == config.world and (config.sharder is None or r["sharder"] == config.sharder)]
        measured = statistics.median(times[-args.rounds:]) if times else None
        spread = (max(times) - min(times)) / measured if times and measured else None
        pred = predicted[config.name]["predicted_ms"] * 1000
        errors[config.name] = None if not measured else (pred - measured) / measured
        base = errors.get(config.recorded) if config.recorded else None
        if base is not None and errors[config.name] is not None:
            added[config.name] = (1 + errors[config.name]) / (1 + base) - 1
        shaped = measured_shapes.get(config.name, {}).get("predicted_ms")
        if shaped is not None and measured:
            with_shapes[config.name] = (shaped * 1000 - measured) / measured
        lines.append(f"| {config.name} | {config.recorded or '(recorded)'} | {pred / 1000:.3f} | "
                     f"{'-' if measured is None else f'{measured / 1000:.3f}'} | {_pct(errors[config.name])} | "
                     f"{'-' if spread is None else f'{100 * spread:.1f}%'} | {_pct(base)} | "
                     f"{_pct(added.get(config.name))} | {'-' if shaped is None else f'{shaped:.3f}'} | "
                     f"{_pct(with_shapes.get(config.name))} |")
    derived = [abs(e) for c, e in errors.items() if e is not None and next(x for x in CONFIGS if x.name == c).recorded]
    if derived:
        gmae = gmae_of_abs(derived)
        lines += ["", f"Derived configurations: geomean |error| {100 * gmae:.1f}%, max {100 * max(derived):.1f}% "
                      f"(n = {len(derived)})."]
    if with_shapes:
        shaped_errors = [abs(e) for e in with_shapes.values()]
        lines += ["", f"The same derived configurations with `--measure-shapes` (their new op shapes microbenchmarked "
                      f"and those ops refitted before predicting): geomean |error| "
                      f"{100 * gmae_of_abs(shaped_errors):.1f}%, max "
                      f"{100 * max(shaped_errors):.1f}% (n = {len(shaped_errors)})."]
    if added:
        own = [abs(e) for e in added.values()]
        lines += ["", f"The derivations alone (error relative to the recorded configuration's): geomean "
                      f"{100 * gmae_of_abs(own):.1f}%, max {100 * max(own):.1f}%."]
    lines += ["", "## Commands and their wall time (s)", "", "| command | s |", "|---|---|", *log, ""]
    out = args.out or RESULTS / f"whatif_accuracy_{platform}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
