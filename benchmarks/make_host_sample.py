"""Build the host-path sample shipped in ``pmdb/samples/host_path/`` (the default lender of GPU predictions) from the
shared H200 trace: a fresh workspace registers the H200 spec sheet, imports the GPT-2 large training step recorded
with torch 2.11 (Kineto + ET in the same pass) with its unprofiled step time from ``run.json`` (``--measured-ms``),
fits its overhead table (T1-T5, the profiled host path scaled to the unprofiled step: fitters.overheads) and writes
that table, its settings, the sheet and the provenance as one JSON file. Deterministic for a given pmdb.

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
    if not (trace / "run.json").is_file():
        print(f"make_host_sample: {trace} is missing (see --shared)", file=sys.stderr)
        return 2
    run = json.loads((trace / "run.json").read_text())
    home = Path(tempfile.mkdtemp(prefix="pmdb-host-sample-")) / "ws"
    pmdb(home, "init")
    pmdb(home, "platform-specs", str(args.shared / SHEET))
    pmdb(home, "collect", "trace", "--kineto", str(trace / "kineto.json.gz"), "--et", str(trace / "et.json.gz"),
         "--platform", host_path.PLATFORM, "--workload", "h200_gpt2_large",
         "--measured-ms", str(run["unprofiled_step_ms"]))
    pmdb(home, "fit", "overheads", "--platform", host_path.PLATFORM)
    source = {"trace": f"{TRACE.as_posix()}/ (kineto.json.gz + et.json.gz, one pass) of the shared data",
              "measured": f"for this project, {run['recorded']}", "device": run["device"],
              "program": run["program"], "software": run["software"],
              "unprofiled_step_ms": run["unprofiled_step_ms"], "unprofiled_method": run["unprofiled_method"],
              "made_by": "benchmarks/make_host_sample.py"}
    with Store.open(Workspace(home), read_only=True) as store:
        version = store.scalar("SELECT max(overhead_version) FROM overhead_versions")
        data = export_version(store, int(version), source)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    scale = data["params"].get("host_scale", [{}])[0]
    print(f"wrote {args.out} ({len(data['overheads'])} rows; host path scaled by {scale.get('scale', 1):.3f}: "
          f"profiled iteration {scale.get('profiled_us', 0) / 1e3:.1f} ms, unprofiled "
          f"{run['unprofiled_step_ms']:.1f} ms, device busy {100 * (scale.get('device_busy') or 0):.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
