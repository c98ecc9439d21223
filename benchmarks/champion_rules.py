"""How much the champion rule matters, from the versions a workspace already holds: each model name's champion under
four rules, and the held-out (test) GMAE the champions reach.

    .venv/bin/python benchmarks/champion_rules.py --home WS [--home WS2 ...] [--out FILE]

Rules (per model name with two or more families fitted on the same data):

- **pmdb** (`fitters.selection.champion_of`, since 2026-12-01): the lowest validation GMAE, or with fewer than
  `MIN_VALIDATION_CONFIGS` validation configurations the analytic family; the test split chooses nothing.
- **validation only**: the lowest validation GMAE whatever the rows (a learned family's score is tuned on them).
- **analytic only**: roofline / additive work terms always (a choice made before any data is seen).
- **best on test**: the lowest test GMAE (pmdb's rule before 2026-12-01). Its figure is optimistic: the choice
  among families was made on the very rows that score it.

Only the test GMAEs already stored are read (no fit). Written to benchmarks/results/champion_rules.md by default.
"""
from __future__ import annotations

import argparse
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from fitters.selection import ANALYTIC_FAMILIES, champion_of
from gpu_kernel_accuracy import md_table
from pmdb.config import resolve_workspace
from pmdb.store import Store

RESULTS = Path(__file__).resolve().parent / "results"
RULES = ("pmdb", "validation only", "analytic only", "best on test")


def candidates(store: Store) -> pd.DataFrame:
    """The newest version of each family per model name, of names with two or more families on the same data and a
    validation score for each."""
    frame = store.query(
        "SELECT m.platform, m.name, m.version, m.family, m.test_gmae, m.validation_gmae, m.validation_configs, m.data_hash, "
        "coalesce(a.version = m.version, FALSE) AS champion FROM model_versions m "
        "LEFT JOIN model_aliases a ON a.name = m.name AND a.alias = 'champion' "
        "WHERE m.test_gmae IS NOT NULL "
        "QUALIFY row_number() OVER (PARTITION BY m.name, m.family ORDER BY m.version DESC) = 1")
    keep = frame.groupby("name").filter(lambda x: len(x) >= 2 and x["data_hash"].nunique() == 1
                                        and x["validation_configs"].notna().all())
    return keep.reset_index(drop=True)


def pick(rows: pd.DataFrame, rule: str) -> pd.Series:
    """The row a rule makes champion."""
    analytic = rows[rows["family"].isin(ANALYTIC_FAMILIES)]
    by_validation = rows.loc[rows["validation_gmae"].fillna(np.inf).idxmin()]
    if rule == "pmdb":
        return rows.loc[champion_of(rows)]
    if rule == "validation only":
        return by_validation
    if rule == "analytic only":
        return analytic.iloc[0] if not analytic.empty else by_validation
    return rows.loc[rows["test_gmae"].idxmin()]


def summarise(frame: pd.DataFrame) -> pd.DataFrame:
    """Per platform and rule: names, geometric mean and median of the champions' test GMAE (%), and how often the
    rule's champion is the one the store holds."""
    out = []
    for platform, part in frame.groupby("platform"):
        names = list(part.groupby("name"))
        median_rows = int(part.groupby("name")["validation_configs"].min().median())
        for rule in RULES:
            chosen = pd.DataFrame([pick(rows, rule) for _, rows in names])
            gm = 100 * float(np.exp(np.mean(np.log(chosen["test_gmae"].clip(lower=1e-6)))))
            out.append({"platform": platform, "rule": rule, "names": len(names),
                        "median validation configurations": median_rows,
                        "champions' test GMAE % (geomean)": round(gm, 2),
                        "median %": round(100 * float(chosen["test_gmae"].median()), 2),
                        "analytic champions": int(chosen["family"].isin(ANALYTIC_FAMILIES).sum()),
                        "same as the store's": int(chosen["champion"].sum())})
    return pd.DataFrame(out)


def _host() -> str:
    try:
        lines = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        return "lscpu unavailable"
    keep = [" ".join(line.split()) for line in lines if line.split(":")[0] in ("Model name", "L2 cache", "L3 cache")]
    return "; ".join(keep)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, action="append", required=True,
                        help="workspace whose registered versions are read (repeatable)")
    parser.add_argument("--out", type=Path, default=RESULTS / "champion_rules.md", help="Markdown results file")
    args = parser.parse_args(argv)
    frames = []
    for home in args.home:
        with Store.open(resolve_workspace(home), read_only=True) as store:
            frames.append(candidates(store))
    frame = pd.concat(frames, ignore_index=True)
    if frame.empty:
        print("champion_rules: no model name with two or more scored families in these workspaces")
        return 2
    table = summarise(frame)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["# Champion rules against the held-out errors they reach", "",
             f"{stamp}; read on {_host()} (nothing is timed: the stored test and validation GMAEs of "
             f"{len(frame)} versions of {frame['name'].nunique()} model names). `benchmarks/champion_rules.py`, "
             "rules in its docstring; `best on test` is optimistic (chosen on the rows that score it).", "",
             md_table(table), ""]
    args.out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
