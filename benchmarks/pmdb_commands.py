"""The benchmarks' one way to run a pmdb command in a workspace: printed, timed into a Markdown log, and a failure
ends the benchmark naming the command (its last output beside it)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PMDB = [sys.executable, "-m", "pmdb"]
ENV = {"MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}


@dataclass(frozen=True)
class Commands:
    """pmdb commands of one benchmark (``name`` heads its failure messages)."""

    name: str
    shown_chars: int = 110   # how much of a command line its timing row keeps

    def _run(self, home: Path, args: tuple[str, ...], log: list[str]) -> subprocess.CompletedProcess:
        shown = "pmdb " + " ".join(args)
        print(f"$ {shown}", flush=True)
        started = time.perf_counter()
        done = subprocess.run([*PMDB, "--home", str(home), *args], capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, **ENV})
        log.append(f"| `{shown[:self.shown_chars]}` | {time.perf_counter() - started:.1f} |")
        if done.returncode != 0:
            raise SystemExit(f"{self.name}: `{shown}` failed ({done.returncode}):\n{done.stdout[-2000:]}"
                             f"{done.stderr[-2000:]}")
        return done

    def run(self, home: Path, *args: str, log: list[str]) -> str:
        """Its output, stderr after stdout (notes and warnings included)."""
        done = self._run(home, args, log)
        return done.stdout + ("\n" + done.stderr if done.stderr else "")

    def stdout(self, home: Path, *args: str, log: list[str]) -> str:
        """Its standard output alone (what a table or JSON answer is printed on)."""
        return self._run(home, args, log).stdout

    def sql(self, home: Path, query: str, log: list[str]) -> list[dict]:
        """The rows of one query (`pmdb sql --format json`)."""
        return json.loads(self.stdout(home, "sql", query, "--format", "json", log=log) or "[]")

    def capture(self, home: Path, *args: str, log: list[str]) -> int:
        """`pmdb collect workload ARGS` (a traced run or a --graph-only capture), then the trace set it stored: the
        newest captured one."""
        self.run(home, "collect", "workload", *args, log=log)
        return int(self.sql(home, "SELECT max(trace_set_id) AS id FROM v_trace_sets WHERE source = 'captured'",
                            log)[0]["id"])


def workspace_parser(doc: str, out: Path, fit_budget_minutes: float | None, fitted: str = ""
                     ) -> "argparse.ArgumentParser":
    """The options every from-an-empty-workspace benchmark takes: --shared, --workspace, --out and the time budget
    of its `pmdb fit ... --all` (``fitted`` names what that fit is of, for the help; None: it runs no such fit)."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (default ../shared/data beside the project)")
    parser.add_argument("--workspace", type=Path, default=None,
                        help="workspace to build (default: a new temporary one; must not exist)")
    parser.add_argument("--out", type=Path, default=out, help="Markdown results file")
    if fit_budget_minutes is not None:
        parser.add_argument("--fit-budget-minutes", type=float, default=fit_budget_minutes,
                            help=f"safety cap on the searches of `pmdb fit --all` of {fitted} (counted work decides "
                                 f"the models; a cap that cuts one is recorded; default {fit_budget_minutes:g})")
    return parser


def neusight_parser(doc: str, known: "dict[str, str]", out_help: str, seed_help: str) -> "argparse.ArgumentParser":
    """The options of a benchmark over the NeuSight tables of some GPUs (no workspace): --shared, --out, --gpus (keys
    of ``known``, for :func:`neusight_gpus`) and --seed."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data",
                        help="the shared data folder (default ../shared/data)")
    parser.add_argument("--out", type=Path, default=None, help=out_help)
    parser.add_argument("--gpus", default=",".join(known), help=f"GPUs to use (default {','.join(known)})")
    parser.add_argument("--seed", type=int, default=0, help=seed_help)
    return parser


def emit(text: str, out: Path | None) -> None:
    """Print a benchmark's Markdown and append it to ``out`` (a results file that keeps earlier runs), if given."""
    print(text)
    if out:
        with out.open("a") as handle:
            handle.write(text + "\n")


def host_line() -> str:
    """The host a benchmark ran on, as lscpu names it (model, L2 and L3 lines) and its core count: every CPU-side
    figure is written beside it."""
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()
    except OSError:
        lines = []
    keep = [" ".join(line.split()) for line in lines if line.startswith(("Model name", "L2 cache", "L3 cache"))]
    return "; ".join(keep + [f"{os.cpu_count()} cores (lscpu)"])


def new_workspace(name: str, workspace: Path | None, prefix: str, *, folders: tuple[Path, ...] = (),
                  files: tuple[Path, ...] = ()) -> Path | None:
    """The workspace a from-an-empty-workspace benchmark builds (``workspace``, or a new temporary one named after
    ``prefix``), once its inputs from the shared data are there (``folders`` as folders, ``files`` as anything);
    None, after one line on stderr, when an input is missing or the workspace given already exists."""
    import tempfile

    for needed, there in [(f, f.is_dir()) for f in folders] + [(f, f.exists()) for f in files]:
        if not there:
            print(f"{name}: {needed} is missing (the shared data folder; see --shared)", file=sys.stderr)
            return None
    home = workspace or Path(tempfile.mkdtemp(prefix=prefix)) / "ws"
    if home.exists():
        print(f"{name}: {home} exists; give a new --workspace", file=sys.stderr)
        return None
    return home


def neusight_gpus(name: str, shared: Path, gpus: str, known: "dict[str, str]") -> "tuple[Path, list[str]] | None":
    """The NeuSight tables folder under the shared data folder and the GPUs a ``--gpus`` list names (keys of
    ``known``); None after one error line on stderr, headed by the benchmark's ``name`` (an unknown GPU, no folder)."""
    wanted = [g.strip() for g in gpus.split(",") if g.strip()]
    unknown = [g for g in wanted if g not in known]
    if unknown or not wanted:
        print(f"{name}: unknown GPU {', '.join(unknown) or '(none)'}: use {', '.join(known)}", file=sys.stderr)
        return None
    base = shared / "gpu_kernels" / "neusight"
    if not base.is_dir():
        print(f"{name}: {base} is missing (the shared data folder; see --shared)", file=sys.stderr)
        return None
    return base, wanted
