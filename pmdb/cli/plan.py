"""``pmdb plan``: the analytical transformer planner (search, sweep, validate). Logic lives in planner/."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from pmdb import platform as platforms
from pmdb.cli.common import open_store, render
from pmdb.errors import PmdbError
from planner import model as models
from planner.calibration import Calibrations
from planner.candidates import RECOMPUTE, STRATEGIES, framework as framework_preset
from planner.registered import CHAMPION
from planner.search import has_candidates
from planner.study import calibration_for, display_frame, resolve_system, run_study, usage_text

plan_app = typer.Typer(help="Analytical transformer training planner: the fastest parallel configurations that fit, "
                            "per model, GPU count and system.", invoke_without_command=True, no_args_is_help=False)

_MODEL_HELP = "Model preset (" + ", ".join(models.PRESETS) + ") or a model JSON file."
_SYSTEM_HELP = ("System: a shipped description (a100, a100-40gb, h100, h200, b200), a system JSON file, or "
                "platform:NAME to build one from a platform's measured peaks in the store.")
_COLLECTIVES_HELP = ("Calibrated collectives: time them from this platform's measured curves (e.g. imported "
                     "nccl-tests results) where they cover the message size and group.")
_STRATEGY_HELP = f"Tensor-parallel strategy to search: {', '.join(STRATEGIES)} or all."
_CALIBRATION_HELP = ("Planner calibration of the system to use (a version number, champion or latest of "
                     "pmdb.<system>.planner, made by `pmdb plan calibrate`).")


def _fitted(store, system: str, version: Optional[str]):
    """The registered planner calibration of a shipped system at ``version`` (None when not asked for)."""
    if version is None:
        return None
    from planner.fitting import load_registered
    if system.startswith("platform:") or "/" in system or system.endswith(".json"):
        raise PmdbError(f"--calibration needs a shipped system (a100, h100, ...), not {system!r}: calibrations are "
                        f"registered per shipped system")
    return load_registered(store, system, version).calibration


def _ints(text: str, option: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise PmdbError(f"bad {option} {text!r}: give comma-separated integers") from None
    if not values or min(values) < 1:
        raise PmdbError(f"bad {option} {text!r}: give positive integers")
    return values


def _at_least_one(**options: Optional[int]) -> None:
    """Counts checked before a run row is made (``global_batch`` stands for --global-batch)."""
    for name, value in options.items():
        if value is not None and value < 1:
            raise PmdbError(f"bad --{name.replace('_', '-')} {value}: must be at least 1")


def _check_strategy(strategy: str) -> None:
    if strategy not in (*STRATEGIES, "all"):
        raise PmdbError(f"bad --strategy {strategy!r}: use {', '.join(STRATEGIES)} or all")


@plan_app.callback(invoke_without_command=True)
def plan(ctx: typer.Context,
         model: Optional[str] = typer.Option(None, "--model", help=_MODEL_HELP),
         gpus: Optional[int] = typer.Option(None, "--gpus", help="Number of GPUs."),
         global_batch: Optional[int] = typer.Option(None, "--global-batch", help="Global batch size (sequences)."),
         system: str = typer.Option("h100", "--system", help=_SYSTEM_HELP),
         strategy: str = typer.Option("1d", "--strategy", help=_STRATEGY_HELP),
         top: int = typer.Option(10, "--top", help="How many of the fastest configurations to print and store."),
         workers: int = typer.Option(1, "--workers", help="Processes evaluating candidate chunks (1 = this one)."),
         nvlink_domain: Optional[int] = typer.Option(None, "--nvlink-domain",
                                                     help="Override the system's NVLink domain size (GPUs)."),
         framework: str = typer.Option("planner", "--framework",
                                       help="Framework settings: planner (sequence parallel, fused attention, "
                                            "overlapped DP/PP traffic) or megatron-deepspeed."),
         base_system: str = typer.Option("h100", "--base-system",
                                         help="With --system platform:NAME: where the fields not measured come from."),
         calibrated: bool = typer.Option(False, "--calibrated",
                                         help="With --system platform:NAME: time collectives from the platform's "
                                              "measured curves, then GEMMs/collectives from --model-dir models, "
                                              "then from the platform's registered champion models."),
         model_dir: list[Path] = typer.Option([], "--model-dir",
                                              help="A fitted model directory (fitters' saved format) for calibrated "
                                                   "mode; repeat for several."),
         collectives_from: Optional[str] = typer.Option(None, "--collectives-from", help=_COLLECTIVES_HELP),
         planner_calibration: Optional[str] = typer.Option(None, "--calibration", help=_CALIBRATION_HELP),
         fmt: str = typer.Option("table", "--format", help="table, csv or json."),
         output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the configurations to this file."),
         quiet: bool = typer.Option(False, "--quiet", help="No progress bar.")) -> None:
    """Search the parallel configurations of MODEL on GPUS GPUs of SYSTEM; print the top K and store the study."""
    if ctx.invoked_subcommand is not None:
        return
    if model is None or gpus is None or global_batch is None:
        raise PmdbError("pmdb plan needs --model, --gpus and --global-batch (see pmdb plan --help)")
    _at_least_one(gpus=gpus, global_batch=global_batch, top=top, workers=workers)
    _check_strategy(strategy)
    if output is not None and not Path(output).parent.exists():
        raise PmdbError(f"cannot write {output}: directory {Path(output).parent} does not exist")
    shape = models.load(model)
    fw = framework_preset(framework)
    if not has_candidates(shape, strategy, gpus, global_batch):
        raise PmdbError(f"no {strategy} configuration of {shape.name} divides {gpus} GPUs, its layers and heads, and a "
                        f"global batch of {global_batch}")
    with open_store(ctx) as store:
        chosen, platform = resolve_system(store, system, base=base_system, nvlink_domain=nvlink_domain)
        calibration = None
        if calibrated or collectives_from or model_dir:
            source = platforms.resolve(store, collectives_from) if collectives_from else platform
            calibration = calibration_for(store, source, model_dir, registry_alias=CHAMPION if calibrated else None)
        fitted = _fitted(store, system, planner_calibration)
        if fitted is not None:
            chosen = fitted.system(chosen)
            calibration = fitted if calibration is None else Calibrations(calibration, fitted)
        args = {"model": model, "gpus": gpus, "global_batch": global_batch, "system": system, "strategy": strategy,
                "top": top, "workers": workers, "nvlink_domain": nvlink_domain, "framework": framework,
                "calibrated": calibrated, "collectives_from": collectives_from,
                "model_dir": [str(d) for d in model_dir], "calibration": fitted.label if fitted else None}
        with store.run("plan", platform, args) as run:
            study = run_study(store, run, shape, chosen, gpus=gpus, global_batch=global_batch, strategy=strategy,
                              fw=fw, top=top, workers=workers, platform=platform, calibration=calibration,
                              progress=not quiet)
            result = study.result
            run.summary = {"studies": 1, "evaluated": result.evaluated, "feasible": result.feasible}
    if result.top.empty:
        typer.echo(f"no configuration of {shape.name} on {gpus} × {chosen.name} fits in memory: the smallest needs "
                   f"{result.min_memory_bytes / 1e9:.1f} GB per GPU, usable "
                   f"{chosen.hbm_bytes * chosen.efficiency['hbm_usable'] / 1e9:.1f} GB")
    else:
        render(display_frame(result.top, rounded=fmt == "table"), fmt, output)
    typer.echo(f"{shape.name} on {gpus} × {chosen.name}: evaluated {result.evaluated} configurations in "
               f"{result.elapsed_s:.2f} s ({result.rate:,.0f}/s), {result.feasible} fit; study {study.study_id} stored",
               err=fmt != "table")
    if calibration is not None:
        typer.echo(f"timed by: {usage_text(result.usage)} ({calibration.label})", err=fmt != "table")
    if fitted is not None:
        typer.echo(f"calibration: {fitted.label}", err=fmt != "table")


@plan_app.command()
def sweep(ctx: typer.Context,
          model: str = typer.Option(..., "--model", help=_MODEL_HELP),
          gpus: str = typer.Option(..., "--gpus", help="Comma-separated GPU counts, e.g. 2048,4096,8192."),
          global_batch: int = typer.Option(..., "--global-batch", help="Global batch size (sequences)."),
          systems: str = typer.Option("a100,h200,b200", "--systems",
                                      help="Comma-separated systems (shipped names or JSON files)."),
          nvlink_domains: Optional[str] = typer.Option(None, "--nvlink-domains",
                                                       help="Comma-separated NVLink domain sizes to try per system "
                                                            "(default: each system's own)."),
          strategy: str = typer.Option("1d", "--strategy", help=_STRATEGY_HELP),
          top: int = typer.Option(10, "--top", help="Configurations stored per study."),
          workers: int = typer.Option(1, "--workers", help="Processes evaluating candidate chunks."),
          framework: str = typer.Option("planner", "--framework", help="planner or megatron-deepspeed."),
          plot: Optional[Path] = typer.Option(None, "--plot", help="Draw time vs GPUs per system into this PNG."),
          fmt: str = typer.Option("table", "--format", help="table, csv or json."),
          quiet: bool = typer.Option(False, "--quiet", help="No progress bar.")) -> None:
    """Run the search over GPU counts × systems (× NVLink domain sizes): the scaling study of the seed paper."""
    _at_least_one(global_batch=global_batch, top=top, workers=workers)
    _check_strategy(strategy)
    counts = _ints(gpus, "--gpus")
    domains = _ints(nvlink_domains, "--nvlink-domains") if nvlink_domains else [None]
    shape = models.load(model)
    fw = framework_preset(framework)
    if plot is not None and not Path(plot).parent.exists():
        raise PmdbError(f"cannot write {plot}: directory {Path(plot).parent} does not exist")
    rows = []
    with open_store(ctx) as store:
        chosen = [resolve_system(store, name, nvlink_domain=d)[0] for name in systems.split(",") if name.strip()
                  for d in domains]
        args = {"model": model, "gpus": counts, "global_batch": global_batch, "systems": systems,
                "nvlink_domains": nvlink_domains, "strategy": strategy, "top": top, "framework": framework}
        with store.run("plan", None, args) as run:
            for system in chosen:
                for n in counts:
                    study = run_study(store, run, shape, system, gpus=n, global_batch=global_batch,
                                      strategy=strategy, fw=fw, top=top, workers=workers, progress=not quiet)
                    best = study.result.top.iloc[0] if not study.result.top.empty else None
                    rows.append({"system": system.name, "gpus": n, "study": study.study_id,
                                 "time_s": None if best is None else round(float(best["time_s"]), 4),
                                 "samples_per_s": None if best is None else round(float(best["samples_per_s"]), 2),
                                 "memory_gb": None if best is None else round(float(best["memory_gb"]), 1),
                                 "best": _config_text(best) if best is not None else (
                                     "does not fit" if study.result.evaluated else "no valid configuration"),
                                 "evaluated": study.result.evaluated})
            run.summary = {"studies": len(rows)}
        if plot is not None:
            from planner.plots import plot_sweep
            plot_sweep(store, run.run_id, plot)
    import pandas as pd
    render(pd.DataFrame(rows), fmt)
    if plot is not None:
        typer.echo(f"wrote {plot}", err=fmt != "table")


def _config_text(row) -> str:
    keys = [k for k in ("tp", "cp", "summa_hidden", "summa_tokens", "pp", "dp", "micro_batch", "panels") if k in row
            and row[k] == row[k]]
    return f"{row['strategy']} " + " ".join(f"{k}={int(row[k])}" for k in keys) + f" rc={row['recompute']}"


@plan_app.command()
def validate(ctx: typer.Context,
             file: Path = typer.Argument(..., help="CSV of measured runs (headers: GPUs, global batch, micro batch, "
                                                   "hidden size, attention heads, layers, sequence length, "
                                                   "tensor/data/pipeline parallelism, iteration time (ms))."),
             system: str = typer.Option("a100", "--system", help=_SYSTEM_HELP),
             framework: str = typer.Option("megatron-deepspeed", "--framework",
                                           help="Framework settings the runs used (megatron-deepspeed or planner)."),
             recompute: str = typer.Option("full", "--recompute",
                                           help="Activation recomputation the runs used: none, selective or full."),
             vocab: int = typer.Option(50257, "--vocab", help="Vocabulary size (GPT-2 tokenizer: 50257)."),
             worst: int = typer.Option(10, "--worst", help="How many of the worst-predicted rows to print."),
             collectives_from: Optional[str] = typer.Option(None, "--collectives-from", help=_COLLECTIVES_HELP),
             planner_calibration: Optional[str] = typer.Option(None, "--calibration", help=_CALIBRATION_HELP),
             fmt: str = typer.Option("table", "--format", help="table, csv or json.")) -> None:
    """Predict every listed run with its own parallelism (no search); report MAPE, GMAE and the worst rows.
    Runs larger than one NVLink domain are priced with the two-tier network (groups placed as Megatron does)."""
    from planner.store_rows import save_validation
    from planner.validate import read_runs, validate as run_validation
    runs = read_runs(file)
    fw = framework_preset(framework)
    with open_store(ctx) as store:
        chosen, platform = resolve_system(store, system)
        calibration = None
        if collectives_from:
            calibration = calibration_for(store, platforms.resolve(store, collectives_from), [])
        fitted = _fitted(store, system, planner_calibration)
        result = run_validation(runs, chosen, fw, vocab=vocab, recompute=recompute, calibration=calibration,
                                fitted=fitted)
        args = {"file": str(file), "system": system, "framework": framework, "recompute": recompute, "vocab": vocab,
                "collectives_from": collectives_from, "calibration": fitted.label if fitted else None}
        with store.run("plan-validate", platform, args) as run:
            save_validation(store, run.run_id, result.rows, source_file=str(file), system=chosen, fw=fw)
            run.summary = {k: round(v, 6) if isinstance(v, float) else v for k, v in result.summary.items()}
    s = result.summary
    typer.echo(f"{s['n']} runs on {chosen.name} ({fw.name}): MAPE {100 * s['mape']:.1f}%  GMAE {100 * s['gmae']:.1f}%  "
               f"std {100 * s['std']:.1f}%  max {100 * s['max']:.1f}%", err=fmt != "table")
    if calibration is not None:
        typer.echo(f"timed by: {usage_text(result.usage)} ({calibration.label})", err=fmt != "table")
    typer.echo(f"calibration: {fitted.label if fitted else 'none (system file constants)'}", err=fmt != "table")
    shown = result.worst(worst).drop(columns=["breakdown"])
    shown = shown.assign(measured_ms=shown.pop("measured_s") * 1e3, predicted_ms=shown.pop("predicted_s") * 1e3)
    render(shown.round({"measured_ms": 1, "predicted_ms": 1, "rel_error": 3, "memory_gb": 1}), fmt)


@plan_app.command()
def calibrate(ctx: typer.Context,
              runs_file: List[Path] = typer.Option(..., "--runs", help="CSV of measured runs (the headers `pmdb "
                                                                       "plan validate` reads); repeat it to fit "
                                                                       "ONE calibration on several files (e.g. "
                                                                       "single- and multi-node runs)."),
              system: str = typer.Option("a100", "--system", help="Shipped system the runs were measured on "
                                                                  "(a100, h100, ...)."),
              seed: int = typer.Option(0, "--seed", help="Seed of the train/test split by configuration."),
              test_fraction: float = typer.Option(0.2, "--test-fraction",
                                                  help="Share of the configurations held out (never fitted on)."),
              framework: str = typer.Option("megatron-deepspeed", "--framework",
                                            help="Framework settings the runs used (megatron-deepspeed or planner)."),
              recompute: str = typer.Option("full", "--recompute",
                                            help="Activation recomputation the runs used: none, selective or full."),
              vocab: int = typer.Option(50257, "--vocab", help="Vocabulary size (GPT-2 tokenizer: 50257)."),
              max_evaluations: int = typer.Option(400, "--max-evaluations",
                                                  help="Most planner evaluations of the training runs the fit "
                                                       "may spend."),
              fmt: str = typer.Option("table", "--format", help="table, csv or json (the fitted parameters).")
              ) -> None:
    """Fit the planner's free parameters on the training split of measured runs (the inter-node network's only
    when some runs span several nodes), report held-out MAPE/GMAE and register the calibration as a new version of
    pmdb.<system>.planner (aliases latest, champion)."""
    import pandas as pd

    from planner import fitting
    from planner.system import load as load_system
    from planner.validate import read_runs
    if system.startswith("platform:") or "/" in system or system.endswith(".json"):
        raise PmdbError(f"bad --system {system!r}: calibrations are fitted for a shipped system (a100, h100, ...)")
    if recompute not in RECOMPUTE:
        raise PmdbError(f"bad --recompute {recompute!r}: use {', '.join(RECOMPUTE)}")
    if max_evaluations < 1:
        raise PmdbError(f"bad --max-evaluations {max_evaluations}: give a positive number")
    base = load_system(system)
    fw = framework_preset(framework)
    runs = pd.concat([read_runs(path) for path in runs_file], ignore_index=True)
    result = fitting.fit(runs, base, fw, vocab=vocab, seed=seed, recompute=recompute, test_fraction=test_fraction,
                         max_evaluations=max_evaluations)
    model = fitting.PlannerCalibrationModel(result.calibration, base.as_dict(), fw.name, vocab, recompute)
    args = {"runs": [str(path) for path in runs_file], "system": system, "seed": seed, "test_fraction": test_fraction,
            "framework": framework, "recompute": recompute, "vocab": vocab, "max_evaluations": max_evaluations}
    with open_store(ctx) as store:
        with store.run("plan-calibrate", None, args) as run:
            name, version, champion = fitting.register(store, result, model, fit_run_id=run.run_id,
                                                       source=",".join(str(path) for path in runs_file))
            run.summary = {"name": name, "version": version, "test_mape": round(result.test_summary["mape"], 6),
                           "test_gmae": round(result.test_summary["gmae"], 6),
                           "n_params": len(result.calibration.params)}
    tr, te = result.train_summary, result.test_summary
    typer.echo(f"{name} v{version} ({len(result.calibration.params)} parameters, seed {seed}; champion v{champion}): "
               f"train {tr['n']} runs MAPE {100 * tr['mape']:.1f}% GMAE {100 * tr['gmae']:.1f}%; "
               f"held out {te['n']} runs MAPE {100 * te['mape']:.1f}% GMAE {100 * te['gmae']:.1f}%",
               err=fmt != "table")
    frame = pd.DataFrame([{"parameter": k, "value": round(v, 4), "unit": fitting.PARAMS[k][3]}
                          for k, v in result.calibration.params.items()])
    render(frame, fmt)


def register(app: typer.Typer) -> None:
    app.add_typer(plan_app, name="plan")
