"""The report's sections, one builder each: (store, output folder, platform or None) -> Section(s). Every builder
returns its section even without data: then ``missing`` says what is absent and which command produces it."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from pmdb.errors import PmdbError
from pmdb.store import Store
from report import checks, figures, model_links
from report.kernel_figures import kernel_error_dots, summarise
from report.page import Section, Table
from simulator.error_stats import named
from simulator.compute_phase import frame_paces, pace_warning
from simulator.memory_phase import frame_memory_paces
from simulator.wake_loss import wake_warning

FEW_TEST_ROWS = 5  # a model scored on fewer held-out rows gets a note: its GMAE rests on very few points

_KERNEL_VERSIONS = """
SELECT m.platform, m.name, m.op, m.pass, m.cache_state, m.implementation, m.dtype, m.family, m.version,
       m.test_gmae, m.test_mape, m.n_train, m.n_test, m.mlflow_run_id,
       coalesce(c.version = m.version, false) AS is_champion
FROM model_versions m
LEFT JOIN collection_runs r USING (run_id)
LEFT JOIN model_aliases c ON c.name = m.name AND c.alias = 'champion'
WHERE (m.run_id IS NULL OR r.status = 'completed') AND m.world_size IS NULL AND (? IS NULL OR m.platform = ?)
ORDER BY m.name, m.version
"""


def _on(frame: pd.DataFrame, platform: str | None) -> pd.DataFrame:
    """Rows of ``platform`` (all rows when None or when the frame has no platform column)."""
    if platform is None or "platform" not in frame.columns:
        return frame
    return frame[frame["platform"] == platform].reset_index(drop=True)


def _pct(values: pd.Series) -> pd.Series:
    return (100 * values.astype(float)).round(1)


# ---- kernel models -------------------------------------------------------------------------------------------------
def models_section(store: Store, out: Path, platform: str | None) -> Section:
    section = Section("kernel_models", "Kernel models: held-out test errors",
                      "Held-out test GMAE of every kernel and embedding model name (op x pass x cache state), "
                      "worst first: the champion (else latest) version as a large dot, the other families' latest "
                      "versions as small markers; n = held-out rows (paper Table I). The table links each model "
                      "to its fit's scatter plot and its MLflow run. The test rows choose nothing: the champion has "
                      "the lowest GMAE on the training side (a validation part of it, or where that part holds "
                      "fewer than 30 configurations, 5-fold cross-validation over all of it), or is the analytic "
                      "family (roofline, additive work terms) where fewer than 3 configurations were scored.")
    versions = store.query(_KERNEL_VERSIONS, [platform, platform])
    if versions.empty:
        section.missing = "no fitted kernel models: run `pmdb collect ops`, then `pmdb fit --all`"
        return section
    rows = summarise(versions)
    if kernel_error_dots(rows, out / "kernel_errors.png"):
        section.figures.append("kernel_errors.png")
    runs = model_links.experiments(store.workspace)
    table = pd.DataFrame({
        "model (registered name)": rows["name"], "cache": rows["cache_state"],
        "shown": [f"{r['family']} v{int(r['version'])}" for _, r in rows.iterrows()],
        "champion": rows["is_champion"].map({True: "yes", False: "no (latest)"}),
        "test GMAE %": _pct(rows["test_gmae"]), "test MAPE %": _pct(rows["test_mape"]),
        "n_test": rows["n_test"], "n_train": rows["n_train"],
        "other families (GMAE %)": [", ".join(f"{f} {100 * g:.1f}" for f, g in sorted(o.items()))
                                    for o in rows["others"]],
        "links": [model_links.cell(store.workspace, str(r), out, runs) for r in rows["mlflow_run_id"]]})
    section.tables.append(Table("kernel models, worst first", table, html=("links",)))
    few = int((rows["n_test"].fillna(0) < FEW_TEST_ROWS).sum())
    if few:
        section.notes.append(f"{few} of {len(rows)} models were scored on fewer than {FEW_TEST_ROWS} held-out rows: "
                             f"their GMAE is a rough figure (collect a larger sweep: `pmdb collect ops --sweep "
                             f"default`)")
    if runs:
        section.notes.append("MLflow links open while `pmdb ui` serves the workspace (http://127.0.0.1:5000)")
    return section


# ---- collectives ---------------------------------------------------------------------------------------------------
def _fit_skips(store: Store, platform: str | None) -> list[str]:
    """The groups the completed fit runs skipped (their summary), newest run first."""
    frame = store.query("SELECT summary FROM completed_runs WHERE kind = 'fit' AND (? IS NULL OR platform = ?) "
                        "ORDER BY started_at DESC", [platform, platform])
    out: list[str] = []
    for text in frame["summary"]:
        try:
            out += [str(s) for s in (json.loads(text) if isinstance(text, str) else text or {}).get("skipped", [])]
        except (ValueError, AttributeError):
            continue
    return out


def collectives_section(store: Store, out: Path, platform: str | None) -> Section:
    points = _on(named(store, "comm_curves"), platform)
    models = _on(named(store, "report_models"), platform)
    models = models[models["world_size"].notna()]
    in_context = models[models["family"] == "in_context"]
    models = models[models["family"] != "in_context"].reset_index(drop=True)   # curves; the in-context scale below
    section = Section("collectives", "Collectives: fitted curves over their points, held-out errors (Fig. 9)",
                      "Latency per message size (max over ranks of the bytes sent or received; the mean over a sweep's "
                      "iterations, what the models are fitted on, else the median) and the "
                      "fitted piecewise model with its turning points m1, m2 (dashed); each panel's title and the "
                      "table give the model's held-out test GMAE.")
    if points.empty and models.empty:
        section.missing = "no collective measurements: run `pmdb collect comms`, then `pmdb fit --all`"
        return section
    if figures.collective_curves(points, models, out / "collective_curves.png"):
        section.figures.append("collective_curves.png")
    skips = _fit_skips(store, platform)
    rows = []
    for plat, collective, world in figures.panel_keys(points, models):
        fitted = models[(models["platform"] == plat) & (models["op"] == collective) & (models["world_size"] == world)]
        mine = points[(points["platform"] == plat) & (points["world_size"] == world)]
        aliased = sorted(set(mine["collective"][mine["collective"].map(figures.model_collective) == collective])
                         - {collective})
        for name in aliased:
            section.notes.append(f"{name} ws{world}: no curve of its own by design: the {collective} ws{world} "
                                 f"model times it in the simulator, and its random-split points are that model's "
                                 f"held-out test points (drawn in the {collective} panel)")
        if fitted.empty:
            why = [s for s in skips if collective in s]
            failed = store.query("SELECT run_id, error FROM collection_runs WHERE kind = 'fit' AND status IN "
                                 "('failed', 'interrupted') ORDER BY started_at DESC LIMIT 1")
            if why:
                reason = f"the fit skipped it ({why[0]})"
            elif len(failed):
                reason = (f"the latest unfinished fit run {failed['run_id'].iloc[0][:8]} ended with: "
                          f"{failed['error'].iloc[0] or 'no error stored'}; run `pmdb fit --op {collective}`")
            else:
                reason = f"not fitted yet: run `pmdb fit --op {collective}`"
            section.notes.append(f"{collective} ws{world}: measured points but no fitted curve: {reason}")
            continue
        row = fitted.iloc[0]
        p, mul = figures.collective_params(row)
        jumps = checks.curve_jumps(figures.curve, p, mul, (p.m1, p.m2))
        for boundary, below, at in jumps:
            section.warnings.append(
                f"{collective} ws{world} v{int(row['version'])}: the fitted model itself jumps at "
                f"{'m1' if boundary == p.m1 else 'm2'} = {boundary:.3g} bytes ({below:.4g} -> {at:.4g} µs, "
                f"x{max(below, at) / min(below, at):.1f}): its sigmoid is flat between m1 and m2, so the "
                f"continuity solve (fitters/collective.py) cannot meet both ends; this is the model, not the plot")
        rows.append({"collective": collective, "world size": int(world), "platform": plat,
                     "model": f"{row['family']} v{int(row['version'])}",
                     "champion": "yes" if row["is_champion"] else "no (latest)",
                     "test GMAE %": round(100 * row["test_gmae"], 1) if pd.notna(row["test_gmae"]) else None,
                     "test MAPE %": round(100 * row["test_mape"], 1) if pd.notna(row["test_mape"]) else None,
                     "n_test": row["n_test"], "n_train": row["n_train"], "m1 bytes": p.m1, "m2 bytes": p.m2,
                     "t_s µs": p.t_s, "BW_max GB/s": p.bw_max,
                     "continuous": "yes" if not jumps else "no: jumps at " + ", ".join(f"{b:.3g}" for b, _, _ in
                                                                                        jumps)})
    if rows:
        frame = pd.DataFrame(rows)
        if frame["platform"].nunique() == 1:
            frame = frame.drop(columns=["platform"])
        section.tables.append(Table("collective models: held-out errors and fitted parameters", frame))
    else:
        section.missing = "measured points only: no fitted collective model yet (`pmdb fit --all`)"
    for _, row in in_context[in_context["is_champion"].astype(bool)].iterrows():
        section.notes.append(f"{row['op']} ws{int(row['world_size'])}: predictions price it with the in-context "
                             f"version {row['name']} v{int(row['version'])} (`pmdb fit comms-context`), a scale of "
                             f"the curve drawn here")
    return section


# ---- predictions ---------------------------------------------------------------------------------------------------
def _run_table(frame: pd.DataFrame) -> pd.DataFrame:
    from report.prediction_figures import measured_range

    below, above = measured_range(frame)
    meas = frame["measured_us"].astype(float)
    base_err = (frame["baseline_us"] - meas).abs()
    table = pd.DataFrame({
        "run": frame["label"], "mode": frame["mode"], "model set": frame["model_set_id"],
        "measured ms": (meas / 1e3).round(3),
        "p10-p90 ms": [f"{(m - b) / 1e3:.3g}-{(m + a) / 1e3:.3g}" if a or b else ""
                       for m, b, a in zip(meas, below, above)],
        "spread %": _pct(frame["spread"]),
        "predicted ms": (frame["predicted_us"] / 1e3).round(3), "error %": _pct(frame["rel_error"]),
        "baseline ms": (frame["baseline_us"] / 1e3).round(3), "baseline error %": _pct(frame["baseline_rel_error"]),
        "closer": ["baseline" if pd.notna(b) and b < abs(p - m) else "model"
                   for b, p, m in zip(base_err, frame["predicted_us"], meas)]})
    for column, name in (("memory_pace", "memory pace"), ("compute_pace", "compute pace")):
        if column in frame and frame[column].notna().any():   # truth over its prices' probes (simulator.*_phase)
            table[name] = [f"x{v:.2f}" if pd.notna(v) else "" for v in frame[column]]
    if "range_low_us" in frame and frame["range_low_us"].notna().any():   # a GPU known by its spec sheet only
        table.insert(table.columns.get_loc("error %") + 1, "spec-only range ms",
                     [f"{lo / 1e3:.3g}-{hi / 1e3:.3g}" if pd.notna(lo) else ""
                      for lo, hi in zip(frame["range_low_us"], frame["range_high_us"])])
    return table


def _group_names(frame: pd.DataFrame, keys: list[str], shape: bool) -> list[str]:
    """A readable name per row of its group (``keys`` include platform, mode and model_set_id): 'workload bB wsN
    (mode)' when ``shape``, else 'family wsN (mode)'; the target platform is named when the frame has several, the
    model set when the rest of the group has several."""
    rest = [k for k in keys if k != "model_set_id"]
    sets = frame.groupby(rest, dropna=False)["model_set_id"].transform("nunique")
    several = frame["platform"].nunique() > 1
    out = []
    for (_, row), n in zip(frame.iterrows(), sets):
        if shape:
            name = f"{row['workload']}" + (f" b{int(row['batch_size'])}" if pd.notna(row["batch_size"]) else "")
        else:
            name = str(row["family"])
        name += f" ws{int(row['world_size'])}" + (f" on {row['platform']}" if several else "")
        name += f" ({row['mode']}" + (f", {row['model_set_id']}" if n > 1 else "") + ")"
        out.append(name)
    return out


def predictions_sections(store: Store, out: Path, platform: str | None) -> list[Section]:
    from report.prediction_figures import SAME_SHAPE, latest, predicted_vs_measured, stream_breakdown

    fig10 = Section("predictions", "Predicted vs measured vs baseline per workload (Fig. 10/11)",
                    "Latest prediction of every workload run with ground truth; the measured bar's whisker spans "
                    "p10-p90 of its iterations (max over ranks). The baseline is the sum of kernel times per "
                    "stream (no overheads, no synchronisation).")
    fig2 = Section("breakdown", "Per-rank, per-stream time breakdown with idle time (Fig. 2)",
                   "Predicted iteration per rank: compute stream busy, communication alone, and CPU-bound or idle "
                   "time (no stream busy).")
    frame = latest(store, None, platform)
    if frame.empty:
        fig10.missing = fig2.missing = ("no predictions with ground truth: run `pmdb collect workload dlrm` (or "
                                        "transformer), then `pmdb predict --all`")
        return [fig10, fig2]
    frame["shape"] = _group_names(frame, SAME_SHAPE, shape=True)
    frame["group"] = _group_names(frame, ["platform", "family", "world_size", "mode", "model_set_id"], shape=False)
    fig10.warnings += checks.baseline_beats_model(frame, ["group"])
    fig10.warnings += checks.indistinguishable(frame, ["shape"], "sharder", placement="placement")[0]
    for name in sorted(frame["platform"].unique()):
        said = wake_warning(store, str(name))
        if said is not None:
            fig10.warnings.append(f"{name}: {said}")
    compute = frame_paces(store, frame)
    frame["memory_pace"] = [None if p is None else p.ratio for p in frame_memory_paces(store, frame)]
    frame["compute_pace"] = [None if p is None else p.ratio for p in compute]
    model = (frame["mode"] == "model") & ~frame["workload_run_id"].duplicated()
    paced = pace_warning([(label, pace) for label, pace, keep in zip(frame["label"], compute, model) if keep])
    if paced is not None:
        fig10.warnings.append(paced)
    for label, run_id, predicted, measured in zip(frame.loc[model, "label"], frame.loc[model, "workload_run_id"],
                                                  frame.loc[model, "predicted_us"], frame.loc[model, "measured_us"]):
        said = checks.unsettled_truth(store, str(label), run_id, float(predicted),
                                      float(predicted) / float(measured) - 1)
        if said is not None:
            fig10.warnings.append(said)
    for mode in ("model", "replay"):
        for section, plot in ((fig10, predicted_vs_measured), (fig2, stream_breakdown)):
            path = plot(store, out, mode, platform=platform)
            if path is not None:
                section.figures.append(Path(path).name)
    fig10.tables.append(Table("per run", _run_table(frame)))
    errors = _on(named(store, "e2e_errors"), platform)
    fig10.tables.append(Table("end-to-end errors (%) per family and model set", errors))
    if frame["memory_pace"].notna().any() or frame["compute_pace"].notna().any():
        fig10.notes.append("memory pace, compute pace: a 64 MiB read and a one-thread linear at the truth over at "
                           "the op sweeps that priced it (simulator/memory_phase.py, compute_phase.py); within "
                           "x0.90-1.10 the host was in one phase at both")
    no_spread = int((frame["p10_us"].isna() & frame["spread"].isna()).sum())
    if no_spread:
        fig10.notes.append(f"{no_spread} run(s) have no measured spread (no per-iteration times stored): no whisker")
    return [fig10, fig2]


# ---- sharding ------------------------------------------------------------------------------------------------------
def sharding_section(store: Store, out: Path, platform: str | None) -> Section:
    series = _on(named(store, "report_shard_series"), platform)
    studies = _on(named(store, "report_shard_studies"), platform)
    plans = _on(named(store, "report_shard_plans"), platform)
    section = Section("sharding", "Sharding-config selection (Table IV)",
                      "Success: the plan predicted fastest is the measured fastest or within 10% of it. Prediction "
                      "side = capture (when no trace existed) + deriving and simulating every plan; against the "
                      "wall time of running every plan.")
    if studies.empty:
        section.missing = "no sharding studies: run `pmdb shard --task ID --validate` or `pmdb shard --study`"
        return section
    if not series.empty:
        section.tables.append(Table("success rate per series", series))
    else:
        section.missing = "studies without ground truth only: add --validate for the success criterion"
    labelled = plans.assign(study=[f"study {s}" for s in plans["study_id"]])
    section.warnings += checks.indistinguishable(labelled, ["study"], "sharder", "predicted_ms", "measured_ms",
                                                 unit=1.0)[0]
    section.tables.append(Table("studies", studies.drop(columns=["created_at"])))
    section.tables.append(Table("plans: predicted vs measured",
                                plans.drop(columns=["prediction_id", "workload_run_id"])))
    if figures.shard_plans(plans, out / "shard_plans.png"):
        section.figures.append("shard_plans.png")
    return section


# ---- planner -------------------------------------------------------------------------------------------------------
def planner_section(store: Store, out: Path, platform: str | None) -> Section:
    section = Section("planner", "Planner: time per iteration against GPU count",
                      "Latest planner sweep (a `pmdb plan sweep` run over more than one GPU count), best "
                      "configuration per system and GPU count.")
    sweeps = named(store, "report_plan_sweeps")
    if sweeps.empty:
        section.missing = ("no planner sweep stored: run `pmdb plan sweep --model gpt2-345m --gpus 8,16 "
                           "--global-batch 64` (any preset or model file; two or more GPU counts)")
        return section
    from planner.plots import plot_sweep

    run_id = str(sweeps["run_id"].iloc[0])
    section.text += f" Run {run_id}."
    try:
        plot_sweep(store, run_id, out / "planner_sweep.png")
        section.figures.append("planner_sweep.png")
    except PmdbError as exc:
        section.missing = str(exc)
    section.tables.append(Table("planner sweeps, newest first", sweeps))
    return section


BUILDERS = (models_section, collectives_section, predictions_sections, sharding_section, planner_section)
