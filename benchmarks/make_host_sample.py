"""Build the host-path sample shipped in ``pmdb/samples/host_path/`` (the default lender of GPU predictions) from the
shared H200 trace: a fresh workspace registers the H200 spec sheet, imports the GPT-2 large training step recorded
with torch 2.11 (Kineto + ET in the same pass) with its unprofiled step time from ``run.json`` (``--measured-ms``),
fits its overhead table (T1-T5: fitters.overheads) with the host's unprofiled pace calibrated on
``gpu_kernels/h200_launch_floor.csv`` (same H200, same day, same torch; back-to-back timings of small eager ops without
a profiler: ``--host-pace``, fitters.host_pace) and writes that table, its settings (which scale, why, the calibration's
per-op figures), the sheet and the provenance as one JSON file. Deterministic for a given pmdb.

    .venv/bin/python benchmarks/make_host_sample.py [--shared ../shared/data] [--out pmdb/samples/host_path/...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fitters.overheads import export_version  # noqa: E402
from pmdb.config import Workspace  # noqa: E402
from pmdb.samples import host_path  # noqa: E402
from pmdb.store import Store  # noqa: E402

TRACE = Path("traces") / "gpu" / "h200_gpt2_large"
SHEET = Path("gpu_kernels") / "device_configs_extra" / "NVIDIA_H200.json"
PACE = Path("gpu_kernels") / "h200_launch_floor.csv"


def pmdb(home: Path, *args: str) -> None:
    """One pmdb command in the workspace; exits with its output when it fails."""
    done = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), *args], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true",
                                                    "DO_NOT_TRACK": "true"})
    print(f"$ pmdb {' '.join(args)}", flush=True)
    if done.returncode != 0:
        raise SystemExit(f"make_host_sample: `pmdb {' '.join(args)}` failed:\n{done.stdout}{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data", help="shared data folder")
    parser.add_argument("--out", type=Path, default=host_path.TABLE, help="the sample file to write")
    args = parser.parse_args(argv)
    trace = args.shared / TRACE
    if not (trace / "run.json").is_file() or not (args.shared / PACE).is_file():
        print(f"make_host_sample: {trace} or {args.shared / PACE} is missing (see --shared)", file=sys.stderr)
        return 2
    run = json.loads((trace / "run.json").read_text())
    scratch = tempfile.TemporaryDirectory(prefix="pmdb-host-sample-")   # removed at exit, failed or not
    home = Path(scratch.name) / "ws"
    pmdb(home, "init")
    pmdb(home, "platform-specs", str(args.shared / SHEET))
    pmdb(home, "collect", "trace", "--kineto", str(trace / "kineto.json.gz"), "--et", str(trace / "et.json.gz"),
         "--platform", host_path.PLATFORM, "--workload", "h200_gpt2_large",
         "--measured-ms", str(run["unprofiled_step_ms"]))
    pmdb(home, "fit", "overheads", "--platform", host_path.PLATFORM, "--host-pace", str(args.shared / PACE))
    source = {"trace": f"{TRACE.as_posix()}/ (kineto.json.gz + et.json.gz, one pass) of the shared data",
              "measured": f"for this project, {run['recorded']}", "device": run["device"],
              "program": run["program"], "software": run["software"],
              "unprofiled_step_ms": run["unprofiled_step_ms"], "unprofiled_method": run["unprofiled_method"],
              "host_pace": f"{PACE.as_posix()} of the shared data (same H200, torch 2.11, 2026-11-28): each op "
                           f"launched 50 times in a row between two CUDA events / 50, best of 5, no profiler; its "
                           f"host-bound rows only (back to back < 100 us, on the op's plateau)",
              "made_by": "benchmarks/make_host_sample.py"}
    with Store.open(Workspace(home), read_only=True) as store:
        version = store.scalar("SELECT max(overhead_version) FROM overhead_versions")
        data = export_version(store, int(version), source)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    scratch.cleanup()
    scale = data["params"].get("host_scale", [{}])[0]
    print(f"wrote {args.out} ({len(data['overheads'])} rows; host path scaled by {scale.get('scale', 1):.3f} "
          f"({scale.get('method')}; the step's ratio {scale.get('step_scale') or 1:.3f}: profiled iteration "
          f"{scale.get('profiled_us', 0) / 1e3:.1f} ms, unprofiled {run['unprofiled_step_ms']:.1f} ms, device busy "
          f"{100 * (scale.get('device_busy') or 0):.0f}%)")
    for op in (scale.get("calibration") or {}).get("ops", []):
        print(f"  {op['op_name']}: {op['unprofiled_us']:.1f} us back to back ({op['rows']} rows) / "
              f"{op['profiled_us']:.1f} us profiled = {op['ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
