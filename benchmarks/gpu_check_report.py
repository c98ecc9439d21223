"""The report of `benchmarks/gpu_check.sh`: what the GPU path did in one workspace, as Markdown.

Reads the workspace's store read-only and the script's step log (one line per step: ``NAME RC SECONDS``), and
writes the GPU (or CPU) it ran on, the software versions, each step's exit code and time, the op measurement rows
per op (source, how CUDA rows were timed, the median device time beside the median single-call and back-to-back
times, µs), and every replay and model-mode prediction with its error against the measured step.

    python benchmarks/gpu_check_report.py WORKSPACE --log STEPS.log --out benchmarks/results/gpu_check_h100.md
"""
from __future__ import annotations

import argparse
import importlib
import platform as host
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from pmdb.config import Workspace
from pmdb.store import Store

ROWS_SQL = """
SELECT op, pass, source, coalesce(device_timing, cache_state) AS timing, count(*) AS rows,
       median(median_us) AS median_us, median(single_call_us) AS single_call_us,
       median(back_to_back_us) AS back_to_back_us
FROM v_op_measurements WHERE platform = ? GROUP BY ALL ORDER BY op, pass, source, timing
"""
PREDICTIONS_SQL = """
SELECT trace_set_id, workload, mode, predicted_us / 1e3 AS predicted_ms, measured_us / 1e3 AS measured_ms,
       100 * rel_error AS error_pct, self_priced_share
FROM v_prediction_errors WHERE platform = ? ORDER BY trace_set_id, mode
"""


def versions() -> dict[str, str]:
    """Python and the packages the GPU path runs on (``-`` where one is not importable)."""
    found = {"python": host.python_version()}
    for name in ("torch", "duckdb", "mlflow", "transformers", "pandas", "typer"):
        try:
            found[name] = str(getattr(importlib.import_module(name), "__version__", "?"))
        except Exception:  # noqa: BLE001 - a missing or broken package is a fact to report
            found[name] = "-"
    try:
        import torch

        found["torch cuda"] = str(torch.version.cuda or "-")
    except Exception:  # noqa: BLE001
        pass
    return found


def markdown_table(frame: pd.DataFrame, digits: int = 2) -> str:
    """A frame as a Markdown table (numbers rounded; empty cells '-')."""
    if frame.empty:
        return "(none)"
    cells = frame.copy()
    for column in cells.columns:
        if pd.api.types.is_float_dtype(cells[column]):
            cells[column] = cells[column].map(lambda v: "-" if pd.isna(v) else f"{v:.{digits}f}")
    cells = cells.astype(object).where(cells.notna(), "-")
    lines = ["| " + " | ".join(map(str, cells.columns)) + " |", "|" + "---|" * len(cells.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in cells.itertuples(index=False)]
    return "\n".join(lines)


def read_steps(log: Path | None) -> pd.DataFrame:
    """The step log: one ``NAME RC SECONDS [NOTE...]`` line per step."""
    rows = []
    for line in (log.read_text().splitlines() if log and log.exists() else []):
        parts = line.split(maxsplit=3)
        if len(parts) >= 3:
            rows.append({"step": parts[0], "exit": parts[1], "seconds": float(parts[2]),
                         "note": parts[3] if len(parts) > 3 else ""})
    return pd.DataFrame(rows)


def report(workspace: Path, log: Path | None) -> str:
    """The Markdown report of one gpu_check workspace."""
    with Store.open(Workspace(workspace), read_only=True) as store:
        platforms = store.query("SELECT name, device_kind, gpu_name, gpu_count, driver_version, cuda_version, "
                                "torch_version, cpu_model FROM platforms WHERE NOT is_imported ORDER BY "
                                "device_kind = 'cuda' DESC, registered_at DESC")
        if platforms.empty:
            raise SystemExit(f"{workspace}: no platform of this machine is registered")
        chosen = platforms.iloc[0]
        rows = store.query(ROWS_SQL, [chosen["name"]])
        predictions = store.query(PREDICTIONS_SQL, [chosen["name"]])
    device = chosen["gpu_name"] if chosen["device_kind"] == "cuda" else f"CPU: {chosen['cpu_model']}"
    steps = read_steps(log)
    failed = steps[~steps["exit"].isin(["0", "skip"])] if not steps.empty else steps
    skipped = steps[steps["exit"] == "skip"] if not steps.empty else steps
    lines = [f"# GPU check: {device}", "",
             f"Written by `benchmarks/gpu_check.sh` on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, platform "
             f"`{chosen['name']}` ({chosen['device_kind']}; driver {chosen['driver_version'] or '-'}, CUDA "
             f"{chosen['cuda_version'] or '-'}).", "",
             "## Versions", "", markdown_table(pd.DataFrame([versions()])), "",
             "## Steps", "", markdown_table(steps, 1), "",
             f"{len(steps) - len(failed) - len(skipped)} of {len(steps)} steps exited 0"
             + (f"; skipped: {', '.join(skipped['step'])}" if len(skipped) else "")
             + (f"; failed: {', '.join(failed['step'])}." if len(failed) else "."), "",
             "## Op measurement rows", "",
             "Per op: rows that count (v_op_measurements) by source and timing; CUDA microbenchmarks store the "
             "kernels' device time (`kernels`) with the single-call and back-to-back times beside it (µs, medians "
             "over rows); `trace` rows are GPU kernels mined from the traces.", "",
             markdown_table(rows), "",
             "## Predictions", "",
             "Replay (the trace's own times) and model mode against the measured step; error in %. Model mode "
             "runs twice per trace set: first with exact shapes priced by their microbenchmarks or by rows mined "
             "from the traces (`--kernels measured`: in-sample where mined from the same trace, counted in "
             "self_priced_share), then by the fitted models alone (`--kernels models`).", "",
             markdown_table(predictions), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path, help="the workspace gpu_check.sh filled")
    parser.add_argument("--log", type=Path, help="the step log (NAME RC SECONDS per line)")
    parser.add_argument("--out", type=Path, required=True, help="the Markdown file to write")
    args = parser.parse_args(argv)
    text = report(args.workspace, args.log)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
