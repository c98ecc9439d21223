"""How fast is ``pmdb collect import-ops``? Imports every NeuSight GPU folder of the shared data (each
``gpu_kernels/neusight/<GPU>/`` holding ``*.csv.gz`` tables; ``device_configs`` is not one) into a fresh temporary
workspace, one ``--platform`` per folder, through the real CLI entry function ``pmdb.cli.main.main`` (in-process:
the interpreter's start-up and first imports are not counted, reading, parsing, checking and storing are).

    .venv/bin/python benchmarks/import_ops_speed.py [--shared ../shared/data] [--repeat 3] [--output FILE.md]

Each repeat starts from a new workspace (a second import of the same files would be skipped). Reports per GPU the
files, the rows stored, and the median, min and max wall time (s) over the repeats, then the same for the whole set
(target: under 30 s for all folders). Wall times on a shared machine include waiting for the CPU; process CPU time
is reported beside them. Prints a Markdown table (and writes it to ``--output`` when given).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform as pyplatform
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from collectors.gpu_specs import slug  # noqa: E402
from pmdb.cli.main import main as pmdb_main  # noqa: E402
from pmdb.config import Workspace  # noqa: E402
from pmdb.store import Store  # noqa: E402

TARGET_S = 30.0


def gpu_folders(shared: Path) -> list[Path]:
    """The NeuSight folders holding kernel tables, sorted."""
    base = shared / "gpu_kernels" / "neusight"
    if not base.is_dir():
        raise SystemExit(f"import_ops_speed: no NeuSight tables at {base} (give --shared PATH)")
    found = sorted(p for p in base.iterdir() if p.is_dir() and any(p.glob("*.csv.gz")))
    if not found:
        raise SystemExit(f"import_ops_speed: no <GPU>/*.csv.gz folders under {base}")
    return found


def cli(*args: str) -> str:
    """Run ``pmdb ARGS`` in-process; its stdout (an error exits the benchmark)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = pmdb_main(list(args))
    if code != 0:
        raise SystemExit(f"import_ops_speed: `pmdb {' '.join(args)}` exited {code}: {err.getvalue().strip()}")
    return out.getvalue()


def one_repeat(folders: list[Path]) -> dict[str, tuple[float, float, int, int]]:
    """Import every folder into a new workspace: {folder: (wall s, CPU s, files, rows)}."""
    out: dict[str, tuple[float, float, int, int]] = {}
    with tempfile.TemporaryDirectory(prefix="pmdb-import-ops-speed-") as tmp:
        home = Path(tmp) / "ws"
        cli("--home", str(home), "init")
        for folder in folders:
            name = slug(folder.name.replace("_", " "))
            wall, cpu = time.perf_counter(), time.process_time()
            cli("--home", str(home), "collect", "import-ops", str(folder), "--format", "neusight",
                "--platform", name)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            with Store.open(Workspace(home), read_only=True) as store:
                rows = store.scalar("SELECT count(*) FROM op_measurements WHERE platform = ?", [name])
                files = store.scalar("SELECT count(*) FROM imported_files WHERE platform = ?", [name])
            out[folder.name] = (wall, cpu, int(files), int(rows))
    return out


def table(results: list[dict[str, tuple[float, float, int, int]]], folders: list[Path]) -> str:
    lines = ["| GPU folder | platform | files | rows | median s | min s | max s | CPU s (median) |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for folder in folders:
        runs = [r[folder.name] for r in results]
        walls = [w for w, _, _, _ in runs]
        lines.append(f"| {folder.name} | {slug(folder.name.replace('_', ' '))} | {runs[0][2]} | {runs[0][3]} | "
                     f"{statistics.median(walls):.2f} | {min(walls):.2f} | {max(walls):.2f} | "
                     f"{statistics.median(c for _, c, _, _ in runs):.2f} |")
    totals = [sum(w for w, _, _, _ in r.values()) for r in results]
    cpu = [sum(c for _, c, _, _ in r.values()) for r in results]
    rows = sum(r[3] for r in results[0].values())
    files = sum(r[2] for r in results[0].values())
    lines.append(f"| **all {len(folders)} folders** | | {files} | {rows} | **{statistics.median(totals):.2f}** | "
                 f"{min(totals):.2f} | {max(totals):.2f} | {statistics.median(cpu):.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Time `pmdb collect import-ops` on every NeuSight GPU folder of "
                                                 "the shared data (median of repeats, fresh workspace each).")
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                        help="The shared data folder holding gpu_kernels/neusight/ (default: ../shared/data).")
    parser.add_argument("--repeat", type=int, default=3, help="Repeats of the whole set (default 3).")
    parser.add_argument("--output", type=Path, default=None, help="Also write the Markdown report to this file.")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    folders = gpu_folders(args.shared)
    results = []
    for index in range(args.repeat):
        results.append(one_repeat(folders))
        total = sum(w for w, _, _, _ in results[-1].values())
        print(f"repeat {index + 1}/{args.repeat}: {total:.2f} s", file=sys.stderr, flush=True)
    median_total = statistics.median(sum(w for w, _, _, _ in r.values()) for r in results)
    report = "\n".join([
        f"# import-ops speed ({datetime.now():%Y-%m-%d %H:%M})",
        "",
        f"`pmdb collect import-ops <GPU folder> --format neusight --platform <slug>` for every NeuSight folder, "
        f"in-process, fresh workspace per repeat; {args.repeat} repeat(s); machine: {pyplatform.machine()}, "
        f"{os.cpu_count()} CPU(s), Python {pyplatform.python_version()}.",
        "",
        table(results, folders),
        "",
        f"Target: all folders under {TARGET_S:.0f} s: {'met' if median_total < TARGET_S else 'NOT met'} "
        f"(median {median_total:.2f} s).",
    ])
    print(report)
    if args.output:
        args.output.write_text(report + "\n")
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
