"""``pmdb collect workload`` (DLRM / transformer ground truth and traces) and ``pmdb collect tasks``."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Optional

import pandas as pd
import typer

from pmdb.cli.common import PlatformOption, open_store, render
from pmdb.errors import PmdbError


def workload(
    ctx: typer.Context,
    family: str = typer.Argument(..., help="dlrm or transformer."),
    preset: Optional[str] = typer.Option(None, help="DLRM preset: dlrm_default, dlrm_ddp, dlrm_mixed or dlrm_test (default)."),
    arch: Optional[str] = typer.Option(None, help="Transformer architecture (gpt2, bert, xlnet, opt, llama, ...: "
                                                  "any model type transformers' AutoConfig knows)."),
    config: Optional[Path] = typer.Option(None, "--config", help="DLRM: a JSON shape file (bottom_mlp, top_mlp, "
                                          "tables, ...). Transformer: JSON config-class arguments (e.g. vocab_size)."),
    task: Optional[int] = typer.Option(None, help="DLRM: run the tables of this stored task (`pmdb collect tasks`)."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Global batch size (default: the preset's; "
                                                                       "8 for transformers)."),
    world_size: Optional[int] = typer.Option(None, "--world-size", help="Ranks (processes); default 1, or the task's."),
    sharder: Optional[str] = typer.Option(None, help="DLRM table sharder: naive, random, size_greedy, lookup_greedy, "
                                                     "norm_lookup_greedy, size_lookup_greedy (default)."),
    sharding: Optional[Path] = typer.Option(None, help="DLRM: explicit plan, a JSON list of ranks (one per table)."),
    iters: int = typer.Option(30, help="Timed iterations of the ground truth."),
    warmup: int = typer.Option(5, help="Untimed warm-up iterations before them."),
    repeats: int = typer.Option(1, help="Measure the ground truth in this many launches of fresh rank processes "
                                        "(the first also traces); the stored time is the median of their medians."),
    min_repeats: Optional[int] = typer.Option(None, "--min-repeats", help="With --repeats N: stop after this many "
                                              "launches once their medians lie within 3% of each other (the "
                                              "spread is already small); default: all N."),
    threads: Optional[int] = typer.Option(None, help="Intra-op threads per rank (default 1, like the kernel "
                                                  "microbenchmarks: a rank's CPU device is one core)."),
    platform: Optional[str] = PlatformOption,
    index_source: Optional[str] = typer.Option(None, "--index-source", help="DLRM index stream of every table: "
                                               "uniform, zipf:<a>, dataset:<file>[:<table>], locality:<stats>[:<entry>]."),
    embedding: Optional[str] = typer.Option(None, help="DLRM lookup: fbgemm_tbe (default) or torch_embedding_bag."),
    seed: int = typer.Option(0, help="Seed of the weights, the inputs and the random sharder."),
    no_trace: bool = typer.Option(False, "--no-trace", help="Ground truth only: skip the profiled passes."),
    trace_iters: int = typer.Option(3, "--trace-iters", help="Iterations recorded by each profiled pass."),
    layers: Optional[int] = typer.Option(None, help="Transformer layers (default: the architecture's)."),
    hidden: Optional[int] = typer.Option(None, help="Transformer hidden size (FFN = 4x, head dim = hidden/heads)."),
    heads: Optional[int] = typer.Option(None, help="Transformer attention heads."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Transformer sequence length (default 64)."),
    head: Optional[str] = typer.Option(None, help="Transformer training head: auto (default: classification if the "
                                                  "architecture has one), classification, causal-lm, masked-lm."),
    mlp_preset: Optional[str] = typer.Option(None, "--mlp-preset", help="With --task: the preset whose MLPs to use "
                                                                        "(default dlrm_test)."),
    timeout: Optional[float] = typer.Option(None, help="Fail the run if the ranks take longer (seconds)."),
    exchange_dir: Optional[Path] = typer.Option(None, "--exchange-dir", help="Under torchrun: a directory every "
                                                "node shares; the ranks hand their trace files to rank 0 (which "
                                                "stores the run) through it."),
    graph_only: bool = typer.Option(False, "--graph-only", help="Transformer: record the training step's op graph "
                                    "with shapes on the meta device (no weights, no timing; seconds even for "
                                    "billions of parameters) as an ET-only trace set, following the GPU e2e "
                                    "labels' recipe (fp32, eager attention, ones as input ids, cross-entropy "
                                    "against them, forward + backward). Give the model as --config FILE (a "
                                    "transformers config JSON with model_type) with --batch-size and --seq-len."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="With --graph-only: none (default, like the "
                                            "labels), adamw or sgd (multi-tensor, as on a GPU) after the backward."),
    inference: bool = typer.Option(False, "--inference", help="With --graph-only: record the model call alone in "
                                   "eval mode under no_grad (an inference label's recipe; encoder models with a "
                                   "sequence-classification head) instead of a training step."),
    routing: Optional[str] = typer.Option(None, "--routing", help="With --graph-only, mixture-of-experts layers: "
                                          "balanced (default: every expert its even share of the tokens) or inputs "
                                          "(as the recipe's all-ones inputs route where they decide it: every token "
                                          "to the same top-k experts; else balanced)."),
) -> None:
    """Measure a training workload: ground truth per rank (no profiler), then a Kineto-only and an execution-trace
    pass per rank, stored as one trace set. With --graph-only: record a transformer step's shapes only."""
    from collectors.workloads.collect import collect_workload, start_ranks
    from collectors.workloads.requests import workload_request
    from pmdb import platform as platforms

    opts = {k: v for k, v in ctx.params.items() if k not in ("family", "platform")}
    opts["timeout_s"] = opts.pop("timeout")
    if graph_only and family == "transformer":
        _graph_only(ctx, opts, platform)
        return
    from collectors.comms.config import torchrun_env

    env = torchrun_env()
    if env is not None:
        _joined(ctx, family, opts, platform, env)
        return
    if exchange_dir is not None:
        raise PmdbError("--exchange-dir is for a torchrun job (RANK, WORLD_SIZE, MASTER_ADDR set): without one "
                        "the ranks run on this host and hand their traces over themselves")
    with open_store(ctx) as store:
        if family in ("dlrm", "transformer"):
            start_ranks()   # the ranks' imports run while the request is checked and the platform found
        request = workload_request(store, family, opts)
        name = platforms.resolve(store, platform)
        args = {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items()}
        typer.echo(f"{request.family} {request.name}: batch {request.batch_size}, {request.world_size} rank(s) x "
                   f"{request.threads} thread(s), {request.warmup}+{request.iters} iterations"
                   + (f" x {request.repeats} launches" if request.repeats > 1 else "")
                   + (f", sharder {request.sharder} plan {list(request.plan)}" if request.plan else ""), err=True)
        summary = collect_workload(store, name, request, args)
    rows = [("workload_id", summary["workload_id"]), ("measured_us", f"{summary['measured_us']:.1f}"),
            ("spread", f"{summary['spread']:.4f}"), ("trace_set_id", summary.get("trace_set_id", "none (--no-trace)"))]
    if "launch_medians_us" in summary:
        rows[2:2] = [("launch_medians_us", " ".join(f"{m:.1f}" for m in summary["launch_medians_us"])),
                     ("launch_spread", f"{summary['launch_spread']:.4f}")]
    rows += [(f"{rank} {kind} bytes", size) for rank, kinds in summary.get("trace_bytes", {}).items()
             for kind, size in kinds.items()]
    render(pd.DataFrame([(k, str(v)) for k, v in rows], columns=["field", "value"]))


def _joined(ctx: typer.Context, family: str, opts: dict, platform: Optional[str], env) -> None:
    """Inside a torchrun job: rank 0 stores the run, the others measure and hand over
    (collectors.workloads.torchrun)."""
    from collectors.workloads import torchrun
    from collectors.workloads.requests import workload_request
    from pmdb import platform as platforms

    if env.rank != 0:
        torchrun.follow(env, opts.get("timeout_s"))
        typer.echo(f"rank {env.rank}: measured and recorded (rank 0 stores the run)")
        return
    opts = {**opts, "world_size": opts.get("world_size") or env.world_size, "local_ranks": env.local_world_size}
    exchange = opts.pop("exchange_dir", None)
    started = False
    try:
        with open_store(ctx) as store:
            request = workload_request(store, family, opts)
            name = platforms.resolve(store, platform)
            torchrun.check_request(request, env, exchange)
            args = {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items()}
            typer.echo(f"{request.family} {request.name}: batch {request.batch_size}, {env.world_size} ranks of a "
                       f"torchrun job x {request.threads} thread(s), {request.warmup}+{request.iters} iterations; "
                       f"rank 0 stores the run", err=True)
            started = True
            summary = torchrun.collect_joined(store, name, request, args, env, exchange)
    except PmdbError as exc:
        if not started:   # the other ranks wait for their job: tell them
            torchrun.refuse(env, str(exc))
        raise
    rows = [("workload_id", summary["workload_id"]), ("measured_us", f"{summary['measured_us']:.1f}"),
            ("spread", f"{summary['spread']:.4f}"), ("ranks", str(env.world_size)), ("launcher", "torchrun"),
            ("trace_set_id", summary.get("trace_set_id", "none (--no-trace)"))]
    render(pd.DataFrame([(k, str(v)) for k, v in rows], columns=["field", "value"]))


def _graph_only(ctx: typer.Context, opts: dict, platform: Optional[str]) -> None:
    """``--graph-only``: validate the request (before the store is opened), capture and store it."""
    from collectors.workloads.graph_only import collect_graph
    from collectors.workloads.requests import graph_request
    from pmdb import platform as platforms

    # set by the user (typer vendors click: the source enum is compared by name)
    given = {k for k in ctx.params if getattr(ctx.get_parameter_source(k), "name", "DEFAULT")
             not in ("DEFAULT", "DEFAULT_MAP")}
    given = {"timeout_s" if k == "timeout" else k for k in given}
    request = graph_request(opts, given)
    args = {k: (str(v) if isinstance(v, Path) else v) for k, v in ctx.params.items()}
    with open_store(ctx) as store:
        name = platforms.resolve(store, platform)  # an unknown --platform is refused before anything is said
        what = "optimizer " + request.optimizer if request.mode == "train" else "inference (model call alone)"
        typer.echo(f"transformer {request.name}: shape-only capture, batch {request.batch_size}, sequence "
                   f"{request.seq_len}, head {request.head}, {what}", err=True)
        summary = collect_graph(store, name, request, args)
    seconds = summary["seconds"]
    rows = [("workload_id", summary["workload_id"]), ("trace_set_id", summary["trace_set_id"]),
            ("mode", summary["mode"]), ("head", summary["head"]), ("parameters", summary["parameters"]), ("et_nodes", summary["et_nodes"]),
            ("pruned_nodes", summary["pruned_nodes"]),
            ("capture_s", f"{seconds['build'] + seconds['record'] + seconds['normalize']:.2f}"),
            ("store_s", f"{seconds['store']:.2f}"), ("peak_rss_mib", summary["peak_rss_mib"])]
    render(pd.DataFrame([(k, str(v)) for k, v in rows], columns=["field", "value"]))
    if summary.get("routing"):
        typer.echo(textwrap.fill(f"pmdb: note: {summary['routing']}", 80, subsequent_indent="  "), err=True)


def tasks(
    ctx: typer.Context,
    count: int = typer.Option(..., "--count", help="How many tasks to generate."),
    seed: int = typer.Option(0, help="Seed of the generator (task i is drawn from seed and i)."),
    world_size: int = typer.Option(2, "--world-size", help="Ranks the tasks are for (tables: 0.7-1.3 x 13 x ranks)."),
    kind: str = typer.Option("both", help="heavy (all tables L >= 20), normal, or both (alternating)."),
    datasets: Optional[Path] = typer.Option(None, help="Folder with the DLRM datasets' locality_stats.txt files "
                                                       "(e.g. ../shared/data/dlrm_datasets); default: built-in law."),
    dim: int = typer.Option(64, help="Embedding dimension D of every table."),
    max_rows: Optional[int] = typer.Option(None, "--max-rows", help="Cap the rows E of every table."),
    memory_gib: Optional[float] = typer.Option(None, "--memory-gib", help="Memory the tables may use 80% of "
                                                                          "(default: this machine's)."),
) -> None:
    """Generate random DLRM tasks for sharding studies and store them (table `tasks`)."""
    from collectors.workloads.tasks import generate, memory_bytes   # not requests: it imports torch

    if datasets is not None and not datasets.is_dir():
        raise PmdbError(f"--datasets {datasets} is not a directory")
    memory = int(memory_gib * 2**30) if memory_gib else memory_bytes()
    if not memory or memory <= 0:
        raise PmdbError("cannot tell this machine's memory: give --memory-gib")
    rows = generate(count, seed, world_size, memory_bytes=memory, kind=kind, dim=dim, datasets=datasets,
                    max_rows=max_rows)
    with open_store(ctx) as store:
        ids = [store.insert_one("tasks", row, returning="task_id") for row in rows]
    out = pd.DataFrame([{"task_id": i, "kind": r["kind"], "tables": len(r["tables"]),
                         "heavy_tables": sum(t["pooling"] >= 20 for t in r["tables"]),
                         "table_mib": round(sum(t["num_rows"] * t["dim"] * 4 for t in r["tables"]) / 2**20, 1),
                         "seed": r["seed"]} for i, r in zip(ids, rows)])
    render(out)


def register(app: typer.Typer) -> None:
    app.command("workload")(workload)
    app.command("tasks")(tasks)
