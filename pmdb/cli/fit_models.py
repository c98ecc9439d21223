"""``pmdb fit [--op NAME ...|--all] [--family ...] [--cache ...] [--platform NAME] [--trials N] [--max-epochs E]
[--budget-minutes M] [--jobs N]``: fit kernel, embedding and collective models, register every version in MLflow and move
``champion``. GPU platforms with imported forward tables also get backward GEMM versions (``gemm_shapes``)."""
from __future__ import annotations

from typing import List, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import PlatformOption, open_store, render, workspace
from pmdb.errors import PmdbError

SUMMARY_NOTES = 3              # notes --summary prints (the rest are counted)
DEFAULT_BUDGET_MINUTES = 4.0   # fitters.fit.DEFAULT_BUDGET_MINUTES (not imported here: the CLI loads stages lazily)
DEFAULT_TRIALS = 2         # fitters.work.TRAIN.max_trials and fitters.work.GBDT_TRIALS
DEFAULT_MAX_EPOCHS = 400   # fitters.work.TRAIN.max_epochs (fewer on large sets: fitters.work.ROW_PASSES)
MAX_JOBS = 4               # fitters.fit_pool.MAX_JOBS


def fit(ctx: typer.Context,
        op: Optional[List[str]] = typer.Option(None, "--op", help="Op or collective to fit (repeatable), e.g. "
                                               "--op fully_connected --op all_reduce."),
        all_: bool = typer.Option(False, "--all", help="Fit every op and collective measured on the platform."),
        family: str = typer.Option("all", "--family", help="roofline, mlp (embedding lookups: the DeepSets model), "
                                   "gbdt, sigmoid (collectives) or all."),
        cache: str = typer.Option("both", "--cache", help="Which CPU timings to fit on: warm, cold or both "
                                  "(each cache state gets its own models; GPU 'device' rows are always used)."),
        platform: Optional[str] = PlatformOption,
        budget_minutes: float = typer.Option(DEFAULT_BUDGET_MINUTES, "--budget-minutes", min=0.05,
                                             help="Safety cap (minutes) on the time the MLP/GBDT/DeepSets "
                                                  "searches take together; --trials and --max-epochs decide the "
                                                  "models. A search the cap cuts short is recorded (budget_hit) "
                                                  "with a warning: its model depends on the machine's speed."),
        trials: Optional[int] = typer.Option(None, "--trials", min=1,
                                             help="Candidates (hyperparameter sets) each MLP/GBDT/DeepSets search "
                                                  f"tries (default {DEFAULT_TRIALS})."),
        max_epochs: Optional[int] = typer.Option(None, "--max-epochs", min=1,
                                                 help="Epochs per MLP/DeepSets candidate at most (fewer on large "
                                                      "sets: 600 000 rows trained on at most; early stop on "
                                                      f"validation; default {DEFAULT_MAX_EPOCHS})."),
        seed: int = typer.Option(0, "--seed", help="Seed of the splits, searches and initialisations."),
        jobs: Optional[int] = typer.Option(None, "--jobs", min=1,
                                           help="Processes the MLP/GBDT/DeepSets searches run in (default: the "
                                                f"usable cores, at most {MAX_JOBS}); the models are the same "
                                                "for any number."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar."),
        summary: bool = typer.Option(False, "--summary", help="Print one line (versions, champions, their median "
                                     "test GMAE) instead of the table of every version.")) -> None:
    """Fit kernel, embedding and collective models, score them on held-out rows, register each fit as a new version.

    noise_% is the test rows' own noise floor (their repetitions against their medians, at most; kernel models
    only). GPU device timings (imported tables) hold forward kernels only: fully_connected and bmm then also get a
    backward version (family gemm_shapes: the forward champion over the backward GEMMs, no test metrics). A GPU with a
    spec sheet and no tables of its own: `pmdb fit cross-gpu --target NAME`."""
    if ctx.invoked_subcommand is not None:
        return
    if not op and not all_:
        raise PmdbError("say what to fit: --op NAME (repeatable) or --all (`pmdb fit --help`)")
    if op and all_:
        raise PmdbError("give either --op NAME or --all, not both")
    from fitters.fit import FitOptions, counted_work, fit_models
    from fitters.fit_pool import default_jobs

    options = FitOptions(ops=list(op) if op else None, family=family, cache=cache, budget_minutes=budget_minutes,
                         seed=seed, progress=progress, jobs=jobs or default_jobs(),
                         **counted_work(trials, max_epochs))
    with open_store(ctx) as store:
        name = platforms.resolve(store, platform)
        results, notes = fit_models(store, workspace(ctx), name, options)
    for note in notes[:SUMMARY_NOTES] if summary else notes:
        typer.echo(f"note: {note}", err=True)
    if summary:
        if len(notes) > SUMMARY_NOTES:
            typer.echo(f"note: ... and {len(notes) - SUMMARY_NOTES} more (a fit without --summary lists all)",
                       err=True)
        typer.echo(_one_line(results, name))
        return
    shown = results.assign(**{f"{m}_%": (100 * results[f"test_{m}"]).round(2) for m in ("gmae", "mape", "std")})
    shown["noise_%"] = (100 * results["replicate_gmae"]).round(2)   # the test rows' repetitions vs their medians
    shown["champion"] = shown["champion"].map({True: "*", False: ""})
    shown["name"] = shown["name"].str.removesuffix(f"~{name}")  # the platform is on the line below the table
    render(shown[["name", "version", "family", "gmae_%", "noise_%", "mape_%", "std_%", "n_train", "n_test",
                  "dropped", "seconds", "champion"]])
    typer.echo(f"{len(results)} model versions registered on {name}; "
               f"{int(results['champion'].sum())} champions (chosen without the test split)")


def _one_line(results, name: str) -> str:
    """`pmdb fit --summary`: versions, champions and their median held-out GMAE (%)."""
    champions = results[results["champion"]]
    scored = champions["test_gmae"].dropna()
    median = f" (median test GMAE {100 * scored.median():.1f}%)" if len(scored) else ""
    return f"fit: {len(results)} versions, {len(champions)} champions{median} on {name}"


def register(app: typer.Typer) -> None:
    app.callback(invoke_without_command=True)(fit)
