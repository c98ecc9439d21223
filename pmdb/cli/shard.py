"""``pmdb shard``: choose a table sharding without running the workload (predict every plan from derived per-rank
traces), optionally validate against ground truth; ``--study`` runs the paper's Table IV experiment."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError


def shard(
    ctx: typer.Context,
    task: Optional[int] = typer.Option(None, "--task", help="Study the tables of this stored task "
                                                            "(`pmdb collect tasks`)."),
    tables: Optional[Path] = typer.Option(None, "--tables", help="Study a DLRM given as a JSON file: a full DLRM "
                                          "config, or a list of tables {num_rows, pooling[, dim, index_source]} "
                                          "(MLPs of --mlp-preset)."),
    world_size: Optional[int] = typer.Option(None, "--world-size", help="Ranks (default: the task's; 2 with --study)."),
    batch_size: int = typer.Option(512, "--batch-size", help="Global batch size (a multiple of the world size)."),
    sharders: str = typer.Option("all", "--sharders", help="Table III sharders to compare: all, or a comma-separated "
                                 "list of naive, random, size_greedy, lookup_greedy, norm_lookup_greedy, "
                                 "size_lookup_greedy."),
    plan: list[Path] = typer.Option([], "--plan", help="Also compare this plan file (JSON list of ranks, one per "
                                    "table); repeatable; labelled file:<stem>."),
    validate: bool = typer.Option(False, "--validate", help="Also run every plan (ground truth) and report the "
                                  "success criterion and each prediction's error."),
    study: bool = typer.Option(False, "--study", help="Run the whole experiment over --count random heavy tasks "
                               "(validated) and report the success rate (Table IV)."),
    count: int = typer.Option(10, "--count", help="With --study: number of random heavy tasks."),
    seed: int = typer.Option(0, "--seed", help="Seed of the inputs, the random sharder and (--study) the tasks."),
    rounds: int = typer.Option(2, "--rounds", help="Ground truth: interleaved rounds over the plans."),
    iters: int = typer.Option(10, "--iters", help="Ground truth: timed iterations per plan and round."),
    warmup: int = typer.Option(3, "--warmup", help="Ground truth: untimed iterations before them."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Intra-op threads per rank (default 1, "
                                          "like the kernel microbenchmarks)."),
    models: str = typer.Option("champion", "--models", help="Model versions: an alias (champion, latest) or a "
                               "version spec (name:version,...)."),
    cache_state: Optional[str] = typer.Option(None, "--cache-state", help="Kernel models fitted on warm, cold or "
                                              "device timings, or blend (warm and cold); default: per platform kind "
                                              "(cold on CPUs, device on GPUs), as pmdb predict."),
    overhead_version: Optional[int] = typer.Option(None, "--overhead-version", help="Overhead table version "
                                                   "(default: the platform's latest)."),
    mlp_preset: str = typer.Option("dlrm_test", "--mlp-preset", help="MLP widths of tasks and bare tables files."),
    max_rows: int = typer.Option(100_000, "--max-rows", help="With --study: cap the rows E of every table."),
    dim: int = typer.Option(64, "--dim", help="With --study: embedding dimension D of every table."),
    datasets: Optional[Path] = typer.Option(None, "--datasets", help="With --study: draw tables from the DLRM "
                                            "datasets' locality statistics below this folder (default: built-in law)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", help="Fail a launch of the ranks after this many "
                                            "seconds."),
    platform: Optional[str] = typer.Option(None, "--platform", help="Platform whose models predict (default: this "
                                           "machine)."),
    fmt: str = typer.Option("table", "--format", help="Output format: table, csv or json."),
) -> None:
    """Predict every sharding plan of a DLRM task without running it (per-rank traces derived from a recorded trace
    of the same structure, or from a one-iteration capture), rank the plans and store the study."""
    from shard.plans import parse_sharders, resolve_task
    from simulator.model_set import check_cache_state
    from shard.runs import RunSettings
    from shard.study import StudySettings

    for name, value in (("--rounds", rounds), ("--iters", iters), ("--count", count)):
        if value < 1:
            raise PmdbError(f"{name} must be >= 1")
    if warmup < 0 or (threads is not None and threads < 1):
        raise PmdbError("--warmup must be >= 0 and --threads >= 1")
    check_cache_state(cache_state)
    settings = StudySettings(tuple(parse_sharders(sharders)), tuple(plan), models, cache_state, overhead_version,
                             validate,
                             RunSettings(iters, warmup, rounds, threads, seed, timeout))
    args = {k: (str(v) if isinstance(v, Path) else [str(p) for p in v] if isinstance(v, list) else v)
            for k, v in ctx.params.items()}
    with open_store(ctx) as store:
        name = platforms.resolve(store, platform)
        if study:
            if task is not None or tables is not None or plan:
                raise PmdbError("--study draws its own tasks: do not give --task, --tables or --plan")
            _check(store, name, settings, world_size or 2)
            _experiment(store, name, settings, args, count=count, seed=seed, world_size=world_size or 2,
                        batch_size=batch_size, max_rows=max_rows, dim=dim, datasets=datasets, fmt=fmt)
            return
        shard_task = resolve_task(store, task_id=task, tables_file=tables, world_size=world_size,
                                  batch_size=batch_size, mlp_preset=mlp_preset)
        predictor = _check(store, name, settings, shard_task.world_size, shard_task)
        _single(store, name, shard_task, settings, args, fmt, predictor)


def _check(store, platform: str, settings, world_size: int, task=None):
    """Before a run row is made: the plans can be built (plan files exist and fit the task) and the platform has
    the models and overhead version asked for (a session loads models lazily: this only selects them). Returns
    that session, which then predicts the study's plans."""
    from shard.plans import build_plans
    from shard.study import plan_predictor

    if task is not None:
        build_plans(task, settings.sharders, settings.plan_files, settings.run.seed)
    return plan_predictor(store, platform, settings, world_size)


def _say(message: str) -> None:
    typer.echo(message, err=True)


def _single(store, platform: str, task, settings, args: dict, fmt: str, predictor) -> None:
    from shard.study import run_study

    with store.run("shard", platform, args) as run:
        result = run_study(store, platform, task, settings, run.run_id, _say, predictor)
        run.summary = {"study_id": result.study_id, "chosen": result.chosen, "trace_origin": result.trace_origin,
                       "fastest": result.fastest, "success": result.success}
    render(result.table(), fmt)
    if fmt != "table":
        return
    how = ("derived from recorded trace set " + result.trace_origin.split(":", 1)[1]
           if result.trace_origin.startswith("derived-from") and ";" not in result.trace_origin
           else f"{result.trace_origin} (captured: a single-iteration trace recorded for this study)")
    typer.echo(f"\nstudy {result.study_id}: chosen plan {result.chosen}; per-rank traces {how}")
    typer.echo(f"prediction wall time {result.predict_s:.1f} s"
               + (f" + capture {result.capture_s:.1f} s" if result.capture_s else ""))
    if result.success is not None:
        typer.echo(f"measured fastest {result.fastest}; the chosen plan is {100 * result.chosen_slowdown:.1f}% "
                   f"slower: {'success' if result.success else 'miss'} (criterion: fastest or within 10%); running "
                   f"every plan took {result.validate_s:.1f} s")


def _experiment(store, platform: str, settings, args: dict, *, count: int, seed: int, world_size: int,
                batch_size: int, max_rows: int, dim: int, datasets: Optional[Path], fmt: str) -> None:
    from collectors.workloads.requests import memory_bytes
    from shard.experiment import Experiment, run_experiment, series_summary

    if datasets is not None and not datasets.is_dir():
        raise PmdbError(f"--datasets {datasets} is not a directory")
    memory = memory_bytes()
    if not memory:
        raise PmdbError("cannot tell this machine's memory")
    exp = Experiment(count, seed, world_size, batch_size, memory, dim, max_rows, datasets)
    out = run_experiment(store, platform, exp, settings, args, _say)
    ids = [s for s in out.studies.values() if s is not None]
    studies = store.query("SELECT study_id, task_id, num_tables, chosen, fastest, round(100 * chosen_slowdown, 2) "
                          "AS chosen_slowdown_pct, success, round(capture_s, 1) AS capture_s, round(predict_s, 1) "
                          "AS predict_s, round(validate_s, 1) AS validate_s FROM v_shard_studies "
                          "WHERE study_id IN (SELECT unnest(?::BIGINT[])) ORDER BY task_id", [ids])
    render(studies, fmt)
    summary = series_summary(store, out.series)
    if fmt == "table":
        typer.echo(f"\nseries {out.series!r}: {len(ids)} studies ({len(out.skipped)} from earlier runs), "
                   f"{len(out.failures)} failed; this invocation took {out.wall_s:.0f} s")
        for task_id, reason in out.failures.items():
            typer.echo(f"  task {task_id} failed: {reason}")
    render(summary if not summary.empty else pd.DataFrame([{"series": out.series, "tasks": 0}]), fmt)


def register(app: typer.Typer) -> None:
    app.command("shard")(shard)
