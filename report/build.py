"""``pmdb report``: PNG figures and one HTML page (no scripts, no external files; images beside it) from SQL over
the store, so every figure matches the data it was drawn from.

Sections: kernel-model test error histograms per op; collective curves over their points (paper Fig. 9);
predicted vs measured vs baseline per workload (Fig. 10/11) and the per-rank, per-stream breakdown with idle time
(Fig. 2), both drawn by :mod:`report.prediction_figures`; the sharding study table (Table IV); the planner's time against GPU
count when planner sweeps exist. A section without data says what is missing and which command produces it.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import pandas as pd

from pmdb.errors import PmdbError
from pmdb.store import Store
from report import figures
from simulator.error_stats import named

PAGE = "index.html"
STYLE = ("body{font-family:sans-serif;margin:2em;max-width:1300px}table{border-collapse:collapse;font-size:12px}"
         "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#eee}"
         ".missing{color:#a33}img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}")


@dataclass
class Section:
    """One part of the page: a title, what it shows, its figures (file names), tables, or why it is empty."""

    key: str
    title: str
    text: str
    figures: list[str] = field(default_factory=list)
    tables: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    missing: str | None = None


@dataclass
class Report:
    """What was written: the page, the figures, the sections (with what each lacks)."""

    page: Path
    figures: list[Path]
    sections: list[Section]

    @property
    def missing(self) -> dict[str, str]:
        return {s.key: s.missing for s in self.sections if s.missing}


def _on(frame: pd.DataFrame, platform: str | None) -> pd.DataFrame:
    """Rows of ``platform`` (all rows when None or when the frame has no platform column)."""
    if platform is None or "platform" not in frame.columns:
        return frame
    return frame[frame["platform"] == platform].reset_index(drop=True)


def _models_section(store: Store, out: Path, platform: str | None) -> Section:
    models = _on(named(store, "report_models"), platform)
    kernels = models[models["world_size"].isna()]
    section = Section("kernel_models", "Kernel models: held-out test errors",
                      "Champion (else latest) version of every kernel and embedding model; each panel is the "
                      "histogram of its test split's relative errors (paper Table I).")
    if kernels.empty:
        section.missing = "no fitted kernel models: run `pmdb collect ops`, then fit them with `pmdb fit`"
        return section
    if figures.error_histograms(kernels, out / "kernel_errors.png"):
        section.figures.append("kernel_errors.png")
    table = kernels.assign(test_gmae_pct=(100 * kernels["test_gmae"]).round(2),
                           test_mape_pct=(100 * kernels["test_mape"]).round(2))
    section.tables.append(("models", table[["op", "pass", "cache_state", "implementation", "family", "version",
                                            "is_champion", "test_gmae_pct", "test_mape_pct", "n_train", "n_test"]]))
    return section


def _collectives_section(store: Store, out: Path, platform: str | None) -> Section:
    points = _on(named(store, "comm_curves"), platform)
    models = _on(named(store, "report_models"), platform)
    models = models[models["world_size"].notna()]
    section = Section("collectives", "Collectives: fitted curves over their points (Fig. 9)",
                      "Median latency per message size (max over ranks of the bytes sent or received) and the fitted "
                      "piecewise model with its turning points m1, m2 (dashed).")
    if points.empty and models.empty:
        section.missing = "no collective measurements: run `pmdb collect comms` (then `pmdb fit` for the curves)"
        return section
    if figures.collective_curves(points, models, out / "collective_curves.png"):
        section.figures.append("collective_curves.png")
    if models.empty:
        section.missing = "measured points only: no fitted collective model yet (`pmdb fit`)"
    return section


def _predictions_section(store: Store, out: Path, platform: str | None) -> list[Section]:
    from report.prediction_figures import predicted_vs_measured, stream_breakdown

    errors = _on(named(store, "e2e_errors"), platform)
    fig10 = Section("predictions", "Predicted vs measured vs baseline per workload (Fig. 10/11)",
                    "Latest prediction of every workload run with ground truth; the baseline is the sum of kernel "
                    "times per stream (no overheads, no synchronisation).")
    fig2 = Section("breakdown", "Per-rank, per-stream time breakdown with idle time (Fig. 2)",
                   "Predicted iteration per rank: compute stream busy, communication alone, and CPU-bound or idle "
                   "time (no stream busy).")
    if errors.empty:
        why = "no predictions with ground truth: run `pmdb collect workload`, then `pmdb predict RUN_ID`"
        fig10.missing = fig2.missing = why
        return [fig10, fig2]
    fig10.tables.append(("end-to-end errors (%)", errors))
    for mode in ("model", "replay"):
        for section, plot in ((fig10, predicted_vs_measured), (fig2, stream_breakdown)):
            path = plot(store, out, mode, platform=platform)
            if path is not None:
                section.figures.append(Path(path).name)
    return [fig10, fig2]


def _sharding_section(store: Store, out: Path, platform: str | None) -> Section:
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
        section.tables.append(("success rate per series", series))
    else:
        section.missing = "studies without ground truth only: add --validate for the success criterion"
    section.tables.append(("studies", studies.drop(columns=["created_at"])))
    section.tables.append(("plans: predicted vs measured", plans.drop(columns=["prediction_id", "workload_run_id"])))
    if figures.shard_plans(plans, out / "shard_plans.png"):
        section.figures.append("shard_plans.png")
    return section


def _planner_section(store: Store, out: Path, platform: str | None) -> Section | None:
    sweeps = named(store, "report_plan_sweeps")
    if sweeps.empty:
        return None
    from planner.plots import plot_sweep

    section = Section("planner", "Planner: time per iteration against GPU count",
                      f"Latest planner sweep (run {sweeps['run_id'].iloc[0]}), best configuration per GPU count.")
    try:
        plot_sweep(store, str(sweeps["run_id"].iloc[0]), out / "planner_sweep.png")
        section.figures.append("planner_sweep.png")
    except PmdbError as exc:
        section.missing = str(exc)
    return section


def _table_html(frame: pd.DataFrame) -> str:
    shown = frame.astype(object).where(frame.notna(), "")
    return shown.to_html(index=False, escape=True, float_format=lambda v: f"{v:.4g}", border=0)


def _page(sections: list[Section], store: Store, platform: str | None) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>pmdb report</title><style>{STYLE}</style>"
             "</head><body><h1>pmdb report</h1>",
             f"<p>store {html.escape(str(store.workspace.db_path))}; platform {html.escape(platform or 'all')}; "
             f"generated {datetime.now().isoformat(timespec='seconds')}</p><ul>"]
    parts += [f"<li><a href='#{s.key}'>{html.escape(s.title)}</a>" + (" (missing data)" if s.missing else "")
              + "</li>" for s in sections]
    parts.append("</ul>")
    for s in sections:
        parts.append(f"<h2 id='{s.key}'>{html.escape(s.title)}</h2><p>{html.escape(s.text)}</p>")
        if s.missing:
            parts.append(f"<p class='missing'>Missing: {html.escape(s.missing)}</p>")
        parts += [f"<img src='{html.escape(f)}' alt='{html.escape(f)}'>" for f in s.figures]
        for caption, frame in s.tables:
            parts.append(f"<h3>{html.escape(caption)}</h3>{_table_html(frame)}")
    parts.append("</body></html>")
    return "\n".join(parts)


def build_report(store: Store, out_dir: Path, platform: str | None = None) -> Report:
    """Write every figure and ``index.html`` into ``out_dir``; the report (files, sections, what is missing)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PmdbError(f"cannot create the report folder {out}: {exc.strerror}") from None
    builders: list[Callable[[Store, Path, str | None], Section | list[Section] | None]] = [
        _models_section, _collectives_section, _predictions_section, _sharding_section, _planner_section]
    sections: list[Section] = []
    for build in builders:
        made = build(store, out, platform)
        sections += made if isinstance(made, list) else [made] if made is not None else []
    page = out / PAGE
    page.write_text(_page(sections, store, platform), encoding="utf-8")
    return Report(page, [out / f for s in sections for f in s.figures], sections)
