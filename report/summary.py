"""The one-screen summary ``pmdb quickstart`` prints at its end: per workload run its measured time with the spread
of its iterations, the prediction, its error and the baseline's (sum of kernel times); per family (and world size)
the geomean |e| of the model against the baseline's; the stated warnings of :mod:`report.checks`, the host's
vector wake-up where it is large (:mod:`simulator.wake_loss`) and the runs whose truth ran in another compute phase
than their prices (:mod:`simulator.compute_phase`); what-if
predictions judged against ground truth measured elsewhere (``pmdb collect import-e2e``); where the full tables are.

:func:`summarize` reads the store (SQL over the completed-run views); :func:`render` lays the summary out in at most
``height`` lines of at most ``width`` columns, cutting warnings first, then runs, and saying what it cut.
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import pandas as pd

from pmdb.metrics import gmae
from pmdb.store import Store
from collectors.memory_probe import PROBE_BYTES
from report import checks
from simulator.compute_phase import frame_paces, pace_brief
from simulator.llc_found import run_found
from simulator.memory_phase import frame_memory_paces
from simulator.wake_loss import wake_warning

WIDTH, HEIGHT = 80, 24
LABEL = 32   # columns of a run's label

# The latest model-mode prediction of each workload run with ground truth, per target platform, with the run's spread
# and where its truth came from ('measured' here, or 'imported': measured elsewhere).
_LATEST = """
SELECT e.prediction_id, e.workload_run_id, e.platform, e.family, e.workload, e.world_size, e.batch_size, e.sharder,
       e.predicted_us, e.measured_us, e.baseline_us, e.rel_error, e.baseline_rel_error,
       w.spread, coalesce(w.source, 'measured') AS truth, p.device_kind, p.gpu_name,
       TRY_CAST(k.config->>'$.seq_len' AS INTEGER) AS seq_len, CAST(k.sharding AS VARCHAR) AS placement,
       e.in_sample, e.self_priced
FROM v_prediction_errors e
JOIN workload_runs w ON w.run_id = e.workload_run_id
JOIN platforms p ON p.name = e.platform
JOIN trace_sets t ON t.trace_set_id = e.trace_set_id
LEFT JOIN workloads k ON k.workload_id = t.workload_id
WHERE e.mode = 'model'
QUALIFY row_number() OVER (PARTITION BY e.workload_run_id, e.platform
                           ORDER BY e.created_at DESC, e.prediction_id DESC) = 1
ORDER BY e.platform, e.family, e.world_size, e.workload, e.batch_size, e.sharder, e.prediction_id
"""


@dataclass(frozen=True)
class RunRow:
    """One workload run measured here and its latest model-mode prediction (times ms, errors as fractions)."""

    label: str
    measured_ms: float
    spread: float | None          # (p90 - p10) / median of the run's iterations
    predicted_ms: float
    error: float                  # (predicted - measured) / measured
    baseline_error: float | None  # the same for the sum of kernel times
    memory_pace: float | None = None   # the host's memory read time at its truth over at its prices (None: unknown)
    llc_found: float | None = None     # share of a re-read 64 MiB buffer its truth's probes found in the LLC
    compute_pace: float | None = None  # a one-thread linear's time at its truth over at its prices (None: unknown)


@dataclass(frozen=True)
class FamilyRow:
    """Geomean |e| of the model and of the baseline over one family at one world size."""

    name: str
    runs: int
    model_gmae: float
    baseline_gmae: float | None


@dataclass(frozen=True)
class WhatIf:
    """A prediction for another platform judged against a step measured there (imported)."""

    device: str       # the GPU's name (or the platform's)
    gpu: bool
    workload: str     # 'bert_large b2 seq 512'
    predicted_ms: float
    measured_ms: float
    error: float


@dataclass
class Summary:
    runs: list[RunRow] = field(default_factory=list)
    families: list[FamilyRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    whatifs: list[WhatIf] = field(default_factory=list)
    host: str | None = None       # the CPU the local runs were measured on, with its cache sizes


def _label(row: pd.Series, several_platforms: bool) -> str:
    parts = [str(row["workload"]), f"ws{int(row['world_size'])}"]
    if isinstance(row["sharder"], str) and row["sharder"] and int(row["world_size"]) > 1:
        parts.append(row["sharder"])
    if several_platforms:
        parts.append(f"@{row['platform']}")
    return " ".join(parts)


def _optional(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _mib(value) -> str:
    value = _optional(value)
    return "?" if value is None else f"{value / 2 ** 20:g} MiB"


def host_line(store: Store, platforms: list[str]) -> str | None:
    """'host: <CPU model> (<platform>), L2 <size>/core, LLC <size>': what the local figures belong to (the cache
    sizes detected from sysfs when the platform was registered)."""
    if not platforms:
        return None
    frame = store.query("SELECT name, cpu_model, details->>'$.l2_bytes' AS l2, details->>'$.llc_bytes' AS llc "
                        "FROM platforms WHERE list_contains(?, name) ORDER BY name", [platforms])
    parts = [f"{row['cpu_model'] or row['name']}, L2 {_mib(row['l2'])}/core, LLC {_mib(row['llc'])}"
             for _, row in frame.iterrows()]
    return "host: " + "; ".join(parts) if parts else None


def summarize(store: Store) -> Summary:
    """The summary of every workload run with a model-mode prediction (its latest one per target platform), but
    runs whose latest prediction is in-sample (a warning counts them)."""
    frame = store.query(_LATEST)
    out = Summary()
    if frame.empty:
        return out
    in_sample = frame["in_sample"].astype(bool)
    if in_sample.any():
        count = int(in_sample.sum())
        out.warnings.append(f"{count} run{'s' if count > 1 else ''} left out: priced by an in-context collective "
                            f"term fitted on {'their' if count > 1 else 'its'} own traces (calibration, "
                            f"`pmdb fit comms-context`)")
    self_priced = frame["self_priced"].astype(bool) & ~in_sample
    if self_priced.any():
        count = int(self_priced.sum())
        out.warnings.append(f"{count} run{'s' if count > 1 else ''} left out: most of the work kept the traced "
                            f"time of the trace predicted (replay, not a model)")
    frame = frame[~(in_sample | self_priced)]
    local = frame[frame["truth"] != "imported"].copy()
    several = local["platform"].nunique() > 1
    out.host = host_line(store, sorted(local["platform"].unique()))
    for platform in sorted(local["platform"].unique()):
        said = wake_warning(store, platform)
        if said is not None:
            out.warnings.append(said + (f" ({platform})" if several else ""))
    computed = []
    # each platform's sweeps read once; a truth measured on another platform than predicted for has no pace
    for (_, row), pace, compute in zip(local.iterrows(), frame_memory_paces(store, local), frame_paces(store, local)):
        found = run_found(store, row["workload_run_id"])   # the truth's own probes only
        out.runs.append(RunRow(_label(row, several), row["measured_us"] / 1e3, _optional(row["spread"]),
                               row["predicted_us"] / 1e3, float(row["rel_error"]),
                               _optional(row["baseline_rel_error"]), None if pace is None else pace.ratio,
                               None if found is None else found(PROBE_BYTES),
                               None if compute is None else compute.ratio))
        computed.append((out.runs[-1].label, compute))
        said = checks.unsettled_truth(store, out.runs[-1].label, row["workload_run_id"], row["predicted_us"],
                                      float(row["rel_error"]))
        if said is not None:
            out.warnings.append(said)
    said = pace_brief(computed)   # one line: kept where longer warnings are cut (the report names the runs)
    if said is not None:
        out.warnings.insert(0, said)
    if not local.empty:
        local["group"] = [f"{f} ws{int(w)}" + (f" @{p}" if several else "")
                          for f, w, p in zip(local["family"], local["world_size"], local["platform"])]
        local["shape"] = [f"{g} {w} b{int(b)}" if pd.notna(b) else f"{g} {w}"
                          for g, w, b in zip(local["group"], local["workload"], local["batch_size"])]
        alone = local.groupby("group")["shape"].transform("nunique") == 1   # name the group alone
        local.loc[alone, "shape"] = local.loc[alone, "group"]
        local["sharder"] = local["sharder"].fillna("")
        for name, part in local.groupby("group", sort=False):
            base = part.dropna(subset=["baseline_us"])
            baseline = gmae(base["baseline_us"], base["measured_us"]) if len(base) else None
            out.families.append(FamilyRow(str(name), len(part), gmae(part["predicted_us"], part["measured_us"]),
                                          baseline))
            model = gmae(base["predicted_us"], base["measured_us"])   # on the same runs (report.checks' rule)
            if baseline is not None and baseline < model:
                out.warnings.append(f"{name}: the baseline beats the model: geomean |e| {100 * baseline:.1f}% "
                                    f"against {100 * model:.1f}%")
        out.warnings += checks.indistinguishable(local, ["shape"], "sharder", placement="placement")[0]
    for _, row in frame[frame["truth"] == "imported"].iterrows():
        shape = f"{row['workload']}" + (f" b{int(row['batch_size'])}" if pd.notna(row["batch_size"]) else "")
        shape += f" seq {int(row['seq_len'])}" if pd.notna(row["seq_len"]) else ""
        device = str(row["gpu_name"]) if pd.notna(row["gpu_name"]) and row["gpu_name"] else str(row["platform"])
        out.whatifs.append(WhatIf(device, row["device_kind"] == "cuda", shape,
                                  row["predicted_us"] / 1e3, row["measured_us"] / 1e3, float(row["rel_error"])))
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:+.1f}%"


def _ms(value: float) -> str:
    return f"{value:.4g}"


def _wrap(text: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, initial_indent="! ", subsequent_indent="  ", break_on_hyphens=False)


def render(summary: Summary, report: str, title: str = "the latest model-mode prediction of each workload run:",
           width: int = WIDTH, height: int = HEIGHT) -> list[str]:
    """The summary as at most ``height`` lines of at most ``width`` columns (but the report's path, never cut),
    ``title`` first; ``report`` names the HTML report. Warnings are cut first, then runs; a cut says what it left
    out."""
    tail = ["full tables: pmdb errors; pmdb sql --query e2e_errors | prediction_vs_baseline",
            f"report: {report}"]
    whatif: list[str] = []
    for item in summary.whatifs[:2]:
        kind = "GPU what-if" if item.gpu else "what-if"
        whatif += [f"{kind} ({item.device}, {item.workload}):",
                   f"  predicted {item.predicted_ms:.1f} ms, measured {item.measured_ms:.1f} ms, "
                   f"error {_pct(item.error)}"]
    if len(summary.whatifs) > 2:
        more = len(summary.whatifs) - 2
        whatif.append(f"  ... and {more} more what-if prediction{'s' if more > 1 else ''} (pmdb errors)")
    if not summary.runs:
        head = [title, "no workload run measured here has a model-mode prediction yet"]
        return _fit(head + whatif + tail, tail[-1], width, height)
    paced = any(r.memory_pace is not None for r in summary.runs)
    head = [title] + ([summary.host] if summary.host else []) + [
        f"{'run':{LABEL}} {'meas ms':>8} {'spread':>6} {'pred ms':>8} {'error':>7} {'baseline':>8}"
        + (f" {'pace':>5}" if paced else "")]
    rows = [f"{r.label[:LABEL]:{LABEL}} {_ms(r.measured_ms):>8} "
            f"{'-' if r.spread is None else f'{100 * r.spread:.0f}%':>6} {_ms(r.predicted_ms):>8} "
            f"{_pct(r.error):>7} {_pct(r.baseline_error):>8}"
            + (f" {'-' if r.memory_pace is None else f'x{r.memory_pace:.2f}':>5}" if paced else "")
            for r in summary.runs]
    legend = ["spread: (p90-p10)/median of its iterations; baseline: sum of kernel times/stream"]
    if paced:
        legend.append(f"pace: a {PROBE_BYTES // 2 ** 20} MiB read at the truth over at the op sweeps (memory's phase)")
    found = [r.llc_found for r in summary.runs if r.llc_found is not None]
    if found:
        legend.append(f"llc: {100 * min(found):.0f}-{100 * max(found):.0f}% of a re-read {PROBE_BYTES // 2 ** 20} MiB "
                      f"was found in the LLC at the truths")
    families = [f"{'family':{LABEL}} {'runs':>5} {'model |e|':>10} {'baseline |e|':>13}  (geomean)"]
    families += [f"{f.name[:LABEL]:{LABEL}} {f.runs:>5} {100 * f.model_gmae:>9.1f}% "
                 f"{'-' if f.baseline_gmae is None else f'{100 * f.baseline_gmae:.1f}%':>13}"
                 for f in summary.families]
    warnings = [line for text in summary.warnings for line in _wrap(text, width)]
    room = height - (len(head) + len(legend) + len(families) + len(whatif) + len(tail))
    if len(rows) > room - min(len(warnings), 1):       # too many runs: keep one warning line
        keep = max(room - min(len(warnings), 1) - 1, 0)
        cut = len(summary.runs) - keep
        rows = rows[:keep] + [f"... and {cut} more run{'s' if cut > 1 else ''} (pmdb sql --query "
                              f"prediction_vs_baseline)"]
    spare = room - len(rows)
    if len(warnings) > spare:
        shown: list[str] = []
        for text in summary.warnings:
            lines = _wrap(text, width)
            if len(shown) + len(lines) > spare - 1:
                break
            shown += lines
        left = len(summary.warnings) - sum(1 for text in summary.warnings if _wrap(text, width)[0] in shown)
        warnings = (shown + [f"! ... and {left} more warning{'s' if left > 1 else ''} (see the report)"]
                    )[:max(spare, 0)]
    out = head + rows + legend + families + warnings + whatif + tail
    return _fit(out, tail[-1], width, height)


def _fit(lines: list[str], path_line: str, width: int, height: int) -> list[str]:
    """The first ``height`` lines cut to ``width`` columns, but the report's path (never cut: it must work)."""
    return [line if line == path_line else line[:width] for line in lines[:height]]
