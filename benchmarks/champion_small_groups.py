"""Which validation score can choose a champion on small groups: for every kernel or embedding group of a platform
(optionally subsampled to N configurations), each family is fitted on the training side as `pmdb fit` does and
scored on the test side, and scored on its training side three ways:

- **search**: a learned search's own figure (its chosen candidate on the validation rows it was tuned on); the
  analytic families refitted on the rest;
- **nested**: every family's whole fit run again on the rest of the training side, then scored on the validation
  part (``fitters.selection.inner_split``) it never saw: one fold;
- **cv**: every family's whole fit cross-validated over all the training side's configurations in ``--folds``
  folds (``fitters.selection.cross_validated``).

The champions each score picks are set beside pmdb's rule (``fitters.selection.champion_of`` over the score `pmdb fit`
records: cross-validation below ``NESTED_BELOW`` validation configurations, else the search's), the rule before
(2026-12-01 e2ecf2a: one nested fold below ``NESTED_BELOW``, the analytic family with one or two validation
configurations), the analytic family alone and the lowest test GMAE (an optimistic pick: chosen on the rows that
score it).

    .venv/bin/python benchmarks/champion_small_groups.py --home WS --platform P [--subsample N] [--folds K]
        [--out FILE]

Reads the workspace's rows (it registers nothing). Appends its table to the results file (default
benchmarks/results/champion_rules.md).
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from champion_rules import _host
from fitters import data, work
from fitters.fit import _fit_family, _kernel_split, _training_set
from fitters.selection import ANALYTIC_FAMILIES, NESTED_BELOW, champion_of, cross_validated, inner_split, subset
from gpu_kernel_accuracy import md_table
from pmdb.config import resolve_workspace
from pmdb.errors import PmdbError
from pmdb.metrics import gmae
from pmdb.store import Store

RESULTS = Path(__file__).resolve().parent / "results"


def _sample(group: data.KernelGroup, n: int, seed: int) -> data.KernelGroup | None:
    """``group`` restricted to ``n`` of its configurations (seeded), None when it has fewer."""
    keys = group.rows["config_key"].unique()
    if len(keys) < n:
        return None
    keep = group.rows["config_key"].isin(set(np.random.default_rng(seed).choice(keys, n, replace=False))).to_numpy()
    return dataclasses.replace(group, rows=group.rows[keep].reset_index(drop=True),
                               params=group.params[keep].reset_index(drop=True))


def scores(store: Store, platform: str, subsample: int | None, seed: int, log, folds: int = 5) -> pd.DataFrame:
    """One row per (group, family): test GMAE and the two validation scores."""
    peaks = data.peaks(store, platform)
    out = []
    for group in data.kernel_groups(store, platform):
        if subsample:
            group = _sample(group, subsample, seed)
            if group is None:
                continue
        families = ("embedding_linear", "embedding_mlp") if group.embedding else ("roofline", "mlp", "gbdt")
        split = _kernel_split(group, seed)
        training = _training_set(group, split.train, peaks)
        inner = inner_split(training.groups, seed)
        if inner.test.size == 0:
            continue
        truth = group.rows["median_us"].to_numpy(dtype=float)
        held = training.params.iloc[inner.test].reset_index(drop=True)
        started = time.monotonic()
        for family in families:
            def fit(part, family=family):
                return _fit_family(family, part, seed, 60.0, work.TRAIN, work.GBDT_TRIALS)
            model = fit(training)
            test = gmae(model.predict(group.params.iloc[split.test].reset_index(drop=True)), truth[split.test])
            try:   # a held-out shape the fit's features refuse: no score (pmdb's rule does the same)
                nested = gmae(fit(subset(training, inner.train)).predict(held), training.times_us[inner.test])
            except (PmdbError, ValueError):
                nested = np.nan
            own = model.search_record().get("validation_gmae")
            cv = cross_validated(training, seed, fit, folds) if folds else None
            out.append({"name": f"{group.op}.{group.pass_}.{group.implementation}.{group.cache_state}",
                        "family": family, "test": test, "search": nested if own is None else float(own),
                        "nested": nested, "cv": np.nan if cv is None else cv,
                        "validation_configs": int(np.unique(training.groups[inner.test].astype(str)).size),
                        "training_configs": int(np.unique(training.groups.astype(str)).size)})
        log(f"{group.op} {group.pass_} {group.cache_state}: {time.monotonic() - started:.1f} s")
    return pd.DataFrame(out)


def _pick(rows: pd.DataFrame, score: pd.Series, configs: pd.Series) -> float:
    """Test GMAE of the family ``champion_of`` picks when each family's score and configurations scored are these."""
    candidates = pd.DataFrame({"family": rows.index, "test_gmae": rows["test"], "validation_gmae": score,
                               "validation_configs": configs}, index=rows.index)
    return float(rows.loc[champion_of(candidates), "test"])


def summary(frame: pd.DataFrame) -> dict[str, float]:
    """Geometric mean (%) of the champions' test GMAE under each pick, over names with two or more families."""
    picks: dict[str, list[float]] = {"pmdb": [], "before": [], "search": [], "nested": [], "cv": [], "analytic": [],
                                     "best on test": []}
    for _, rows in frame.groupby("name"):
        if len(rows) < 2:
            continue
        rows = rows.set_index("family")
        small = rows["validation_configs"] < NESTED_BELOW
        picks["pmdb"].append(_pick(rows, rows["cv"].where(small, rows["search"]),
                                   rows["training_configs"].where(small, rows["validation_configs"])))
        picks["before"].append(_pick(rows, rows["nested"].where(small, rows["search"]), rows["validation_configs"]))
        analytic = [f for f in ANALYTIC_FAMILIES if f in rows.index]
        picks["search"].append(rows.loc[rows["search"].fillna(np.inf).idxmin(), "test"])
        picks["nested"].append(rows.loc[rows["nested"].fillna(np.inf).idxmin(), "test"])
        picks["cv"].append(rows.loc[rows["cv"].fillna(np.inf).idxmin(), "test"])
        fallback = analytic[0] if analytic else rows["nested"].fillna(np.inf).idxmin()
        picks["analytic"].append(rows.loc[fallback, "test"])
        picks["best on test"].append(rows["test"].min())
    return {k: round(100 * float(np.exp(np.mean(np.log(np.clip(v, 1e-6, None))))), 2) for k, v in picks.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, required=True, help="workspace whose rows are read")
    parser.add_argument("--platform", required=True, help="platform whose kernel groups are fitted")
    parser.add_argument("--subsample", type=int, default=None, help="configurations kept per group (seeded)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the splits, fits and subsample (default 0)")
    parser.add_argument("--folds", type=int, default=5, help="folds of the cross-validated score (default 5)")
    parser.add_argument("--out", type=Path, default=RESULTS / "champion_rules.md", help="results file (appended)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with Store.open(resolve_workspace(args.home), read_only=True) as store:
        frame = scores(store, args.platform, args.subsample, args.seed, print, args.folds)
    if frame.empty:
        print("champion_small_groups: no group with validation rows")
        return 2
    names = frame.groupby("name").filter(lambda x: len(x) >= 2)["name"].nunique()
    row = {"platform": args.platform, "configurations per group": args.subsample or "all", "names": names,
           "median validation configurations": int(frame.groupby("name")["validation_configs"].first().median()),
           "cv folds": args.folds,
           **{f"{k} %": v for k, v in summary(frame).items()}}
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["", f"### Small groups: {args.platform}, {row['configurations per group']} configurations per group",
             "", f"{stamp}, `benchmarks/champion_small_groups.py` (seed {args.seed}, {time.monotonic() - started:.0f} "
             f"s) on {_host()}: the champions' test GMAE (geomean) when the family is picked by each score.", "",
             md_table(pd.DataFrame([row])), ""]
    with args.out.open("a") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
