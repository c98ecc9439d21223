"""A real trace of today's stack, end to end: GPT-2 large trained for three steps on an NVIDIA H200 with torch 2.11,
Kineto + execution trace recorded in one pass (``../shared/data/traces/gpu/h200_gpt2_large``, whose ``run.json`` gives
the unprofiled step time: 168.80 ms).

From an empty workspace, every step an ordinary pmdb command (printed as it runs):

1. register the spec sheets (NeuSight's nine and the H200's) and import the trace WITHOUT ``--platform``: its
   deviceProperties name the H200, so it lands on ``nvidia-h200``; the unprofiled time is given with ``--measured-ms``;
2. replay it (``--mode replay``, every time from the trace) against its own profiled iteration (target < 3%);
3. kernel models NOT fitted on this trace: cross-GPU models from the five NeuSight table GPUs and the H200's sheet
   (``pmdb fit cross-gpu --target nvidia-h200``), then a model-mode prediction against the unprofiled 168.80 ms
   (target < 10%);
4. ``pmdb collect mine-traces``: the trace's kernels become H200 measurement rows (device time per kernel as the GPU
   ran it); ``pmdb fit --platform nvidia-h200 --all`` fits on them, and the trace is predicted again as a user would
   (``--kernels measured``, the default: every op whose exact shape was mined is priced by the median of its mined
   calls, labelled 'mined-self'; target < 3%; in-sample: the prices come from this very trace's kernels), and with
   ``--kernels models`` (the models fitted on the mined rows, cross-GPU champions for the ops with too few shapes to
   fit; in-sample too, no target);
5. the table: errors, mined rows per op, which overhead table (lender) and model families priced each prediction,
   and where each model-mode prediction's time goes (kernels, host path, device idle: from the stored rows);
6. per op and shape, the cross-GPU models' price (the versions of step 3, never fitted on this trace) against the
   device time the H200 traced for the same shape (:func:`cross_gpu_per_shape`): where a GPU none of the tables
   was goes wrong, from true device times (the labels' per-node CSVs of the V100 and L4 are single-call latencies).

    .venv/bin/python benchmarks/gpu_trace_accuracy.py [--shared ../shared/data] [--workspace DIR] [--out FILE]
"""
from __future__ import annotations

import json
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "benchmarks"))

from pmdb_commands import Commands, host_line, new_workspace, workspace_parser  # noqa: E402
H200 = "nvidia-h200"
TABLE_DIRS = {"NVIDIA_A100-PCIE-40GB": "nvidia-a100-pcie-40gb", "Tesla_P100-PCIE-16GB": "tesla-p100-pcie-16gb",
              "Tesla_P4": "tesla-p4", "Tesla_T4": "tesla-t4", "Tesla_V100-PCIE-32GB": "tesla-v100-pcie-32gb"}
TARGETS = {"replay": 3.0, "cross-gpu": 10.0, "mined": 3.0, "fitted": None}
ITERATIONS = 3      # profiled iterations of the trace (ProfilerStep#1..3): mined calls per iteration
SMALL_US = 10.0     # per-shape table: kernels shorter than this (µs traced) are summed apart


_COMMANDS = Commands("gpu_trace_accuracy", shown_chars=100)
pmdb, sql = _COMMANDS.run, _COMMANDS.sql


def _prediction(home: Path, log: list[str]) -> dict:
    """The newest prediction with its overhead table's platform and the families of the models it used."""
    (row,) = sql(home, "SELECT p.prediction_id, p.mode, p.predicted_us, p.measured_us, p.overhead_version, "
                       "p.baseline_us, v.platform AS overheads_of, v.params::VARCHAR AS overhead_params, "
                       "p.unmodelled::VARCHAR AS unmodelled, p.measured_ops, p.device_active_us, "
                       "p.per_rank::VARCHAR AS per_rank, p.range_low_us, p.range_high_us, "
                       "p.range_detail::VARCHAR AS range_detail FROM predictions p "
                       "LEFT JOIN v_overhead_versions v USING (overhead_version) "
                       "ORDER BY p.prediction_id DESC LIMIT 1", log)
    row["families"] = sql(home, "SELECT v.family, count(*) AS versions, sum(m.ops_predicted) AS ops "
                                "FROM prediction_models m JOIN model_versions v USING (name, version) "
                                f"WHERE m.prediction_id = {int(row['prediction_id'])} GROUP BY 1 ORDER BY 3 DESC",
                          log)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = workspace_parser(__doc__, RESULTS / "gpu_trace_accuracy.md", 10.0, "nvidia-h200 on the mined rows")
    parser.add_argument("--cross-gpu-max-rows", type=int, default=3000,
                        help="rows per source GPU and op for the H200's cross-GPU models (a seeded sample)")
    args = parser.parse_args(argv)
    trace = args.shared / "traces" / "gpu" / "h200_gpt2_large"
    kernels = args.shared / "gpu_kernels" / "neusight"
    sheet = args.shared / "gpu_kernels" / "device_configs_extra" / "NVIDIA_H200.json"
    home = new_workspace("gpu_trace_accuracy", args.workspace, "pmdb-gpu-trace-",
                         folders=(kernels / "device_configs",),
                         files=(trace / "kineto.json.gz", trace / "run.json", sheet))
    if home is None:
        return 2
    unprofiled_ms = float(json.loads((trace / "run.json").read_text())["unprofiled_step_ms"])
    log: list[str] = []
    started = time.perf_counter()
    load_before = os.getloadavg()
    pmdb(home, "init", log=log)
    pmdb(home, "platform-specs", *map(str, sorted((kernels / "device_configs").glob("*.json"))), str(sheet), log=log)
    t0 = time.perf_counter()
    imported = pmdb(home, "collect", "trace", "--kineto", str(trace / "kineto.json.gz"), "--et",
                    str(trace / "et.json.gz"), "--measured-ms", f"{unprofiled_ms}", "--workload", "gpt2-large-h200",
                    log=log)
    import_s = time.perf_counter() - t0
    (tset,) = sql(home, "SELECT trace_set_id, platform, measured_us, given_measured_us FROM v_trace_sets", log)
    set_id = str(tset["trace_set_id"])
    pmdb(home, "predict", "--trace-set", set_id, "--mode", "replay", log=log)
    replay = _prediction(home, log)
    for folder, name in TABLE_DIRS.items():
        pmdb(home, "collect", "import-ops", str(kernels / folder), "--format", "neusight", "--platform", name,
             log=log)
    pmdb(home, "fit", "cross-gpu", "--target", H200, "--max-rows", str(args.cross_gpu_max_rows), "--no-progress",
         log=log)
    cross_out = pmdb(home, "predict", "--trace-set", set_id, log=log)
    cross = _prediction(home, log)
    pmdb(home, "collect", "mine-traces", "--trace-set", set_id, log=log)
    mined = sql(home, "SELECT op, pass, count(*) AS rows, count(DISTINCT config_key) AS configs, "
                      "sum(median_us) AS device_us FROM v_op_measurements WHERE platform = 'nvidia-h200' "
                      "AND source = 'trace' GROUP BY 1, 2 ORDER BY 5 DESC", log)
    fit_out = pmdb(home, "fit", "--platform", H200, "--all", "--budget-minutes", str(args.fit_budget_minutes),
                   "--no-progress", log=log)
    fitted = sql(home, "SELECT split_part(name, '~', 1) AS model, family, round(100 * test_gmae, 1) AS gmae_pct "
                       "FROM model_versions WHERE platform = 'nvidia-h200' AND family NOT IN ('cross_gpu', "
                       "'gemm_shapes') ORDER BY 1, 2", log)
    skipped = [line.split("skipped ", 1)[1].split(" (", 1)[0] for line in fit_out.splitlines()
               if "note: skipped" in line]
    per_shape = cross_gpu_per_shape(home)
    mined_out = pmdb(home, "predict", "--trace-set", set_id, log=log)
    insample = _prediction(home, log)
    fitted_out = pmdb(home, "predict", "--trace-set", set_id, "--kernels", "models", log=log)
    by_models = _prediction(home, log)
    report = render(tset, import_s, imported, replay, cross, insample, by_models, mined, unprofiled_ms,
                    [cross_out, mined_out, fitted_out], log, load_before, time.perf_counter() - started, fitted,
                    skipped, per_shape)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)
    return 0


def _err(row: dict) -> float:
    return 100.0 * (row["predicted_us"] - row["measured_us"]) / row["measured_us"]


def _families(row: dict) -> str:
    """Model families with the ops each priced, then the ops priced by measurements of their exact shape (mined
    rows by their label, 'mined-self' = from this very trace set)."""
    parts = [f"{f['family']} ({int(f['ops'])} ops)" for f in row["families"]]
    mined: dict[str, int] = {}
    for entry in json.loads(row.get("unmodelled") or "[]"):
        if str(entry.get("fallback", "")).startswith("mined"):
            mined[entry["fallback"]] = mined.get(entry["fallback"], 0) + int(entry["count"])
    parts += [f"{label} rows ({count} ops)" for label, count in sorted(mined.items())]
    other = int(row.get("measured_ops") or 0) - sum(mined.values())
    if other > 0:
        parts.append(f"microbenchmarks ({other} ops)")
    return ", ".join(parts) or "none"


def _where(label: str, row: dict) -> str:
    """One line: a model-mode prediction's predicted kernel time (compute stream busy), host path (CPU clock at the
    end) and device idle, from its stored per-rank result (ms)."""
    (rank,) = json.loads(row["per_rank"])[:1]
    busy, cpu, step = rank["compute_busy_us"] / 1e3, rank["cpu_us"] / 1e3, row["predicted_us"] / 1e3
    truth = row["measured_us"] / 1e3
    text = (f"- {label}: step {step:.2f} ms = kernels {busy:.2f} ms + device idle {step - busy:.2f} ms; the host "
            f"path ends at {cpu:.2f} ms")
    if cpu > truth:
        text += f" ({100 * (cpu - truth) / truth:+.2f}% against the truth by itself, its waits for the device included)"
    return text


def _overhead_origin(row: dict, kernels_us: float, unprofiled_ms: float) -> str:
    """Where the overhead table (T1-T5) of the model-mode predictions came from, from its stored params."""
    if row["overhead_version"] is None:
        return "Host overheads: none (the named default)."
    params = json.loads(row["overhead_params"] or "{}")
    source = params.get("source") or {}
    scales = [s for s in params.get("host_scale") or [] if s.get("scale")]
    text = (f"Host overheads (T1-T5): overhead version {row['overhead_version']} of {row['overheads_of']}"
            + (f", the shipped host-path sample `{params['sample']}`" if params.get("sample") else "")
            + (f" made from `{source['trace']}`" if source.get("trace") else ""))
    if scales and scales[0].get("method") == "back-to-back calibration":
        cal, step = scales[0]["calibration"], scales[0].get("step_scale") or 1.0
        ops = ", ".join(f"{o['op_name'].split('::')[-1]} {o['ratio']:.3f}" for o in cal["ops"])
        text += (f", every sample scaled by {scales[0]['scale']:.3f}: the host's unprofiled pace from "
                 f"`{cal['source']}` (back-to-back timings of small eager ops on the same H200 without a profiler, "
                 f"host-bound rows only), the median over {len(cal['ops'])} op names of unprofiled back-to-back / "
                 f"profiled per-call host time ({ops}); unprofiled / profiled iteration ({step:.3f}) is only its "
                 f"upper bound ({'reached' if scales[0]['scale'] >= step else 'not reached'}). The table's samples "
                 f"still come from THIS trace's host path (in-sample), but its pace no longer comes from the step "
                 f"it predicts (kernels {kernels_us / 1e3:.1f} ms per replayed iteration, the unprofiled step "
                 f"{unprofiled_ms:.1f} ms)")
    elif scales:
        text += (f", every sample scaled by unprofiled / profiled iteration ({scales[0]['scale']:.3f}). That table "
                 f"is derived from THIS trace and its unprofiled time: the host path of every model-mode prediction "
                 f"is not independent of the truth (kernels {kernels_us / 1e3:.1f} ms per replayed iteration, the "
                 f"unprofiled step {unprofiled_ms:.1f} ms)")
    return text + "."


def _notes(output: str) -> list[str]:
    """The ``pmdb: note:`` and ``pmdb: warning:`` lines of a command's output, each joined with the indented lines
    it wraps onto."""
    notes: list[str] = []
    for line in output.splitlines():
        if line.startswith(("pmdb: note:", "pmdb: warning:")):
            notes.append(line.strip())
        elif notes and line.startswith("  ") and not notes[-1].endswith("|"):
            notes[-1] += " " + line.strip()
        elif notes:
            notes.append("|")   # the note ended
    return [n for n in notes if n != "|"]


def _range_line(row: dict, truth_ms: float) -> str:
    """The cross-GPU prediction's spec-only range (simulator/cross_gpu_range.py) against the unprofiled step."""
    if row.get("range_low_us") is None:
        return "Spec-only range of the cross-GPU prediction: none (no cross-GPU model with held-out ratios)."
    low, high = row["range_low_us"] / 1e3, row["range_high_us"] / 1e3
    detail = json.loads(row["range_detail"]) if row.get("range_detail") else {}
    per_gpu = ", ".join(f"{g} {us / 1e3:.1f}" for g, us in sorted((detail.get("per_gpu_us") or {}).items(),
                                                                   key=lambda kv: kv[1]))
    return (f"Spec-only range of the cross-GPU prediction (`pmdb predict` prints it: the step again with the "
            f"cross-GPU priced kernels, {100 * (detail.get('priced_share') or 0.0):.0f}% of the work, as far off as "
            f"on each source GPU when it was left out): {low:.1f}-{high:.1f} ms; the unprofiled {truth_ms:.2f} ms "
            f"is {'within' if low <= truth_ms <= high else 'OUTSIDE'} it. Per held-out GPU (ms): {per_gpu}.")


def cross_gpu_per_shape(home: Path) -> list[dict]:
    """Each mined (op, pass, shape) of the H200 priced by the op's cross-GPU version (``pmdb fit cross-gpu``: family
    cross_gpu, or gemm_shapes for a GEMM's backward), beside the traced device time: op, pass, shape, calls per
    iteration, traced µs (median per call), cross µs; ops without such a version are left out."""
    sys.path.insert(0, str(ROOT))
    from fitters import features
    from fitters.load import load_model
    from pmdb.config import Workspace
    from pmdb.store import Store

    workspace = Workspace(home)
    with Store.open(workspace, read_only=True) as store:
        rows = store.query("SELECT op, pass, config_key, CAST(params AS VARCHAR) AS params, median_us "
                           "FROM v_op_measurements WHERE platform = ? AND source = 'trace'", [H200])
        versions = store.query("SELECT name, max(version) AS version FROM model_versions WHERE platform = ? "
                               "AND family IN ('cross_gpu', 'gemm_shapes') GROUP BY name", [H200])
    by_name = dict(zip(versions["name"], versions["version"]))
    out: list[dict] = []
    for (op, pass_), group in rows.groupby(["op", "pass"], sort=True):
        name = f"{op}.{pass_}.device~{H200}"
        if name not in by_name:
            continue
        model = load_model(workspace, name, int(by_name[name]))
        for _key, shape in group.groupby("config_key", sort=False):
            params = features.params_frame(shape["params"].iloc[:1])
            priced = float(model.predict(params)[0])
            out.append({"op": op, "pass": pass_, "shape": " ".join(f"{k}={v:g}" for k, v in params.iloc[0].items()),
                        "calls": len(shape) / ITERATIONS, "traced_us": float(shape["median_us"].median()),
                        "cross_us": priced})
    return sorted(out, key=lambda r: -r["calls"] * r["traced_us"])


def _per_shape_lines(per_shape: list[dict], shown: int = 16) -> list[str]:
    """The per-shape table (the largest traced work first) and its totals per iteration."""
    if not per_shape:
        return ["", "Per op and shape: no mined shape of an op with a cross-GPU version."]
    traced = sum(r["calls"] * r["traced_us"] for r in per_shape) / 1e3
    priced = sum(r["calls"] * r["cross_us"] for r in per_shape) / 1e3
    gemm = [r for r in per_shape if r["op"] in ("fully_connected", "bmm")]
    small = [r for r in per_shape if r["traced_us"] < SMALL_US]
    lines = ["", f"Per op and shape: the cross-GPU price (models of step 3, never fitted on this trace) against the "
             f"device time the H200 traced for that shape (median per call), the largest traced work first; the "
             f"{len(per_shape)} shapes of ops with a cross-GPU version, {traced:.1f} ms of traced device time per "
             f"iteration, priced at {priced:.1f} ms (x{priced / traced:.2f}). GEMMs (fully_connected, bmm; "
             f"backward as their forward GEMMs): traced "
             f"{sum(r['calls'] * r['traced_us'] for r in gemm) / 1e3:.1f} ms, priced "
             f"{sum(r['calls'] * r['cross_us'] for r in gemm) / 1e3:.1f} ms. Kernels under {SMALL_US:g} µs "
             f"({len(small)} shapes): traced {sum(r['calls'] * r['traced_us'] for r in small) / 1e3:.2f} ms, priced "
             f"{sum(r['calls'] * r['cross_us'] for r in small) / 1e3:.2f} ms (the tables can only bound a kernel "
             f"their host's floor hid, and the models learn that bound).", "",
             "| op | pass | shape | calls / iteration | traced µs | cross-GPU µs | cross / traced |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['op']} | {r['pass']} | {r['shape']} | {r['calls']:g} | {r['traced_us']:.1f} | "
              f"{r['cross_us']:.1f} | {r['cross_us'] / r['traced_us']:.2f} |" for r in per_shape[:shown]]
    if len(per_shape) > shown:
        lines.append(f"| ... {len(per_shape) - shown} more shapes | | | | | | |")
    return lines


def render(tset: dict, import_s: float, imported: str, replay: dict, cross: dict, insample: dict, by_models: dict,
           mined: list[dict], unprofiled_ms: float, outputs: list[str], log: list[str], load_before: tuple,
           wall_s: float, fitted: list[dict], skipped: list[str], per_shape: list[dict] | None = None) -> str:
    """The Markdown results file."""
    rows = [("replay (every time from the trace)", replay, "the profiled iteration", TARGETS["replay"]),
            ("model, cross-GPU models (not fitted on this trace; GEMMs x the lane correction, measured on this "
             "GPU's back-to-back GEMMs)", cross, "unprofiled", TARGETS["cross-gpu"]),
            ("model, kernels mined from this trace (IN-SAMPLE; `--kernels measured`, the default)", insample,
             "unprofiled", TARGETS["mined"]),
            ("model, models fitted on the mined rows (IN-SAMPLE; `--kernels models`)", by_models, "unprofiled",
             TARGETS["fitted"])]
    lines = [f"# The H200 GPT-2 large trace end to end — {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", "",
             f"Host: {host_line()}; load average before {load_before[0]:.2f} / after "
             f"{os.getloadavg()[0]:.2f}; whole benchmark {wall_s / 60:.1f} min. Trace: "
             f"`traces/gpu/h200_gpt2_large` (torch 2.11, Kineto + ET in one pass), imported without --platform onto "
             f"`{tset['platform']}` in {import_s:.1f} s; its profiled iteration {tset['measured_us'] / 1e3:.2f} ms, "
             f"the unprofiled step {unprofiled_ms:.2f} ms (run.json, given with --measured-ms).", "",
             "| prediction | predicted ms | truth ms | truth | error | target | overheads (table of) | models |",
             "|---|---|---|---|---|---|---|---|"]
    for label, row, truth, target in rows:
        err = _err(row)
        table = "-" if row["overhead_version"] is None else f"v{row['overhead_version']} ({row['overheads_of']})"
        verdict = "- (for information)" if target is None else \
            f"< {target:.0f}%: {'met' if abs(err) < target else 'NOT met'}"
        lines.append(f"| {label} | {row['predicted_us'] / 1e3:.2f} | {row['measured_us'] / 1e3:.2f} | {truth} | "
                     f"{err:+.2f}% | {verdict} | {table} | "
                     f"{_families(row) if row['mode'] == 'model' else '-'} |")
    lines += ["", _range_line(cross, unprofiled_ms), "", _overhead_origin(cross, replay["baseline_us"], unprofiled_ms)]
    labels = ("cross-GPU", "in-sample, mined kernels", "in-sample, fitted models")
    lines += ["", f"Where the model-mode time goes (stored per-rank result; the kernels of the replayed iteration sum "
              f"to {replay['baseline_us'] / 1e3:.2f} ms, the unprofiled step is {unprofiled_ms:.2f} ms):", ""]
    lines += [_where(label, row) for label, row in zip(labels, (cross, insample, by_models))]
    lines += _per_shape_lines(per_shape or [])
    lines += ["", "What the model-mode predictions printed (notes and warnings):", ""]
    lines += [f"- {label}: {note}" for label, out in zip(labels, outputs)
              for note in dict.fromkeys(_notes(out))] or ["- none"]
    lines += ["", "Rows `pmdb collect mine-traces` stored on nvidia-h200 (device time per kernel as the GPU ran it, "
              "summed per op call; 3 iterations):", "",
              "| op | pass | rows | shapes | device ms |", "|---|---|---|---|---|"]
    lines += [f"| {m['op']} | {m['pass']} | {m['rows']} | {m['configs']} | {m['device_us'] / 1e3:.2f} |"
              for m in mined]
    versions = ", ".join(f"{v['model']} {v['family']} {v['gmae_pct']}%" for v in fitted) or "none"
    lines += ["", f"`pmdb fit --platform nvidia-h200 --all` on those rows registered {len(fitted)} version(s) "
              f"({versions}: held-out "
              f"GMAE) and skipped {len(skipped)} (op, pass) with fewer than 5 shapes ({', '.join(skipped)}); the "
              f"`--kernels models` prediction prices those by their cross-GPU champions, the default one every "
              f"op of a mined shape by its mined rows."]
    lines += ["", f"Total mined rows: {sum(m['rows'] for m in mined)}.", "", "Steps (wall seconds on the host above):",
              "", "| command | s |", "|---|---|", *log, ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
