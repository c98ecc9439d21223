"""The fault campaign: runs every fault-injection test of ``tests/faults/`` (real ``pmdb`` processes, real SIGINT,
SIGTERM and kill -9, ``RLIMIT_FSIZE`` for a full disk, real damaged store and WAL files, a deleted MLflow store, bad
input files and arguments; and the probes of issue #38: `pmdb sql` writing or reading files and changing settings,
a full disk while MLflow's store is created or a workload's traces are stored or an export is written, a fit
killed with SIGKILL before it completes, mistyped commands, zero-size model configs, counts no column holds, an ET
naming missing parents, a zero-byte store, a config over the memory cap that its estimate lets through) and writes ``benchmarks/results/reliability.md``: faults tried / survived, bad inputs
tried / rejected cleanly, rows lost, time to recover.

    .venv/bin/python benchmarks/reliability.py [--repeat 1] [--output benchmarks/results/reliability.md]

A case is one test (each parameter of a parametrised test counts once). It survived when the test passed: each
asserts one clear line (no traceback), the exit code, and that no stored row was lost or counted twice. Tests that
interrupt a run and resume it record ``rows_kept`` (rows the interrupted run had committed), ``rows_lost`` (kept rows
the resuming run did not adopt) and ``recover_s`` (wall seconds of the re-run that resumes) with pytest's
``record_property``; the table shows them. Bad-input tests are the cases of ``test_bad_inputs.py``; every other
module is a fault (also the cases of ``test_sql_read_only.py`` and ``test_one_line_errors.py`` are bad input, but a
full disk). Exit 1 when a case failed or a row was lost.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# modules whose cases are bad input (a case about a full disk in them is a fault)
BAD_INPUT_MODULES = ("test_bad_inputs", "test_sql_read_only", "test_one_line_errors")
# what the campaign runs: the fault tests, and a user's own training loop walked through README "Bringing your own
# trace" (conv1d, conv2d, attention, AdamW; issue #38 item 9: every op the recipe measures must be priceable)
CAMPAIGN = ("tests/faults", "tests/simulator/test_own_loop_recipe.py")
RECIPE_MODULES = ("test_own_loop_recipe",)


@dataclass
class Case:
    """One test case of the campaign over its repeats."""

    module: str
    name: str
    outcomes: list[str] = field(default_factory=list)   # passed, failed, skipped per repeat
    seconds: list[float] = field(default_factory=list)
    properties: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    @property
    def kind(self) -> str:
        if self.module in RECIPE_MODULES:
            return "recipe"
        return "bad input" if self.module in BAD_INPUT_MODULES and "full_disk" not in self.name else "fault"


def run_campaign(repeat: int) -> tuple[dict[str, Case], float]:
    """Run tests/faults ``repeat`` times (slow tests included); returns the cases and the wall seconds."""
    cases: dict[str, Case] = {}
    started = time.monotonic()
    for number in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            report = Path(tmp) / "faults.xml"
            print(f"campaign {number + 1}/{repeat}: pytest {' '.join(CAMPAIGN)}", file=sys.stderr)
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *CAMPAIGN,
                            f"--junitxml={report}", "-o", "junit_family=xunit1"], cwd=ROOT,
                           env={**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"})
            if not report.exists():
                raise SystemExit("pytest wrote no report: is the venv active (`make venv`)?")
            for testcase in ET.parse(report).getroot().iter("testcase"):
                module = testcase.get("classname", "").rsplit(".", 1)[-1]
                key = f"{module}::{testcase.get('name')}"
                case = cases.setdefault(key, Case(module, testcase.get("name", "")))
                if testcase.find("skipped") is not None:
                    case.outcomes.append("skipped")
                elif testcase.find("failure") is not None or testcase.find("error") is not None:
                    case.outcomes.append("failed")
                else:
                    case.outcomes.append("passed")
                case.seconds.append(float(testcase.get("time", 0)))
                for prop in testcase.iter("property"):
                    try:
                        case.properties[prop.get("name", "")].append(float(prop.get("value", "nan")))
                    except ValueError:
                        continue
    return cases, time.monotonic() - started


def _cpu_model() -> str:
    """The host's CPU model (/proc/cpuinfo), for the results' header."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def _fmt(values: list[float], digits: int = 1) -> str:
    if not values:
        return "-"
    middle = statistics.median(values)
    text = f"{middle:.{digits}f}" if digits else f"{middle:.0f}"
    return text + (f" ({min(values):.{digits}f}–{max(values):.{digits}f})" if len(values) > 1 else "")


def write_results(cases: dict[str, Case], wall_s: float, repeat: int, load: float, output: Path) -> bool:
    """Write the Markdown results; True when every case that ran passed and no row was lost."""
    lines = ["# Fault campaign (`benchmarks/reliability.py`)", "",
             f"{datetime.now():%Y-%m-%d %H:%M}, {_cpu_model()}, {os.cpu_count()} cores, load average {load:.2f} at "
             f"start, "
             f"{repeat} run(s) of `{' '.join(CAMPAIGN)}` in {wall_s / 60:.1f} min.", ""]
    ok = True
    summary = []
    for kind in ("fault", "bad input", "recipe"):
        chosen = [c for c in cases.values() if c.kind == kind]
        ran = [c for c in chosen if any(o != "skipped" for o in c.outcomes)]
        clean = [c for c in ran if all(o in ("passed", "skipped") for o in c.outcomes)]
        ok &= len(clean) == len(ran)
        verb = {"fault": "survived", "bad input": "rejected cleanly", "recipe": "priced every op"}[kind]
        summary.append(f"- {kind}s: {len(ran)} tried, {len(clean)} {verb}"
                       + (f", {len(chosen) - len(ran)} skipped (data absent)" if len(chosen) > len(ran) else ""))
    lost = sum(sum(c.properties.get("rows_lost", [])) for c in cases.values())
    kept = sum(sum(c.properties.get("rows_kept", [])) for c in cases.values())
    ok &= lost == 0
    summary.append(f"- rows lost: {lost:.0f} of {kept:.0f} rows that interrupted or failed runs had committed "
                   "(every one adopted by the resuming run)")
    recover = [v for c in cases.values() for v in c.properties.get("recover_s", [])]
    if recover:
        summary.append(f"- time to recover (the re-run that resumes, wall s): median {statistics.median(recover):.1f}, "
                       f"max {max(recover):.1f}")
    lines += summary + ["", "| kind | case | result | rows kept | rows lost | recover s | test s |",
                        "|---|---|---|---:|---:|---:|---:|"]
    for case in sorted(cases.values(), key=lambda c: (c.kind, c.module, c.name)):
        result = ("passed" if all(o == "passed" for o in case.outcomes) else
                  "skipped" if all(o == "skipped" for o in case.outcomes) else
                  f"FAILED {case.outcomes.count('failed')}/{len(case.outcomes)}")
        lines.append(f"| {case.kind} | `{case.module}::{case.name}` | {result} | "
                     f"{_fmt(case.properties.get('rows_kept', []), 0)} | {_fmt(case.properties.get('rows_lost', []), 0)} | "
                     f"{_fmt(case.properties.get('recover_s', []))} | {_fmt(case.seconds)} |")
    lines += ["", f"load average at the end: {os.getloadavg()[0]:.2f}", ""]
    output.write_text("\n".join(lines))
    print("\n".join(lines[:len(summary) + 4]))
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=1, help="Runs of the whole campaign.")
    parser.add_argument("--output", type=Path, default=RESULTS / "reliability.md", help="Results file.")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    cases, wall_s = run_campaign(args.repeat)
    return 0 if write_results(cases, wall_s, args.repeat, load, args.output) else 1


if __name__ == "__main__":
    sys.exit(main())
