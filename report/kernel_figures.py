"""The kernel-model error view: one sorted dot plot of held-out test GMAE (%) per op × pass (× implementation,
dtype), one panel per cache state, the shown version (champion, else latest) as a large dot and the other families'
latest versions as small markers, n_test in the row label. Its height is bounded (< 1500 px) whatever the number of
models: rows get thinner instead."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import LogFormatter  # noqa: E402

DPI = 100
MAX_HEIGHT_IN = 13.5     # figure height cap (inches at DPI 100: 1350 px)
ROW_IN = 0.16            # preferred height of one row (inches)
FAMILY_MARKERS = {"roofline": "^", "mlp": "o", "gbdt": "s", "embedding_mlp": "D", "embedding_linear": "v"}


def summarise(versions: pd.DataFrame) -> pd.DataFrame:
    """One row per registered kernel model name: the champion (else latest) version's GMAE, n_test, n_train,
    family, version, MLflow run, and ``others`` = {family: GMAE} of the other families' latest versions."""
    if versions.empty:
        return versions.assign(others=[])
    rows = []
    for name, part in versions.groupby("name", sort=False):
        part = part.sort_values("version")
        champ = part[part["is_champion"].astype(bool)]
        shown = champ.iloc[-1] if len(champ) else part.iloc[-1]
        latest = part.drop_duplicates("family", keep="last")
        others = {str(r["family"]): float(r["test_gmae"]) for _, r in latest.iterrows()
                  if r["family"] != shown["family"] and pd.notna(r["test_gmae"])}
        rows.append({**shown.to_dict(), "others": others})
    frame = pd.DataFrame(rows)
    frame["cache_state"] = frame["cache_state"].fillna("-")
    return frame.sort_values(["cache_state", "test_gmae"], ascending=[True, False], na_position="last"
                             ).reset_index(drop=True)


def common_values(rows: pd.DataFrame) -> dict[str, str]:
    """The most frequent implementation and dtype, and the platform when there is one: labels leave these out
    (the figure's footnote names implementation and dtype)."""
    out = {"platform": str(rows["platform"].iloc[0])} if rows["platform"].nunique() <= 1 else {}
    for key in ("implementation", "dtype"):
        if key in rows and rows[key].notna().any():
            out[key] = str(rows[key].mode().iloc[0])
    return out


def row_label(row: pd.Series, common: dict[str, str] | None = None) -> str:
    """'op pass [implementation] [dtype] [@platform]', leaving out the values of ``common``."""
    parts = [str(row["op"]), str(row["pass"]) if pd.notna(row["pass"]) else ""]
    parts += [str(row[k]) for k in ("implementation", "dtype") if k in row and pd.notna(row[k]) and row[k]
              and str(row[k]) != (common or {}).get(k)]
    if "platform" in row and "platform" not in (common or {}):
        parts.append(f"@{row['platform']}")
    return " ".join(p for p in parts if p)


def kernel_error_dots(rows: pd.DataFrame, path: Path) -> Path | None:
    """Draw :func:`summarise`'s rows; None when no row has a test GMAE. Writes the drawn names into the PNG's
    ``Description`` chunk (JSON list)."""
    rows = rows.dropna(subset=["test_gmae"])
    if rows.empty:
        return None
    states = list(dict.fromkeys(rows["cache_state"]))
    common = common_values(rows)
    longest = max(int((rows["cache_state"] == s).sum()) for s in states)
    row_in = min(ROW_IN, (MAX_HEIGHT_IN - 2.0) / longest)
    font = max(4.0, min(8.0, row_in * 72 * 0.75))
    width = min(13.0, max(9.0, 1.0 + 5.4 * len(states)))
    families = sorted({f for o in rows["others"] for f in o} | set(rows["family"]))
    ncol = int(width // 1.9)
    legend_rows = -(-(2 + len(families)) // ncol)
    height = 1.3 + 0.2 * legend_rows + row_in * longest
    fig, axes = plt.subplots(1, len(states), figsize=(width, height), squeeze=False, layout="constrained")
    values = [100 * rows["test_gmae"]] + [100 * pd.Series(list(o.values())) for o in rows["others"] if o]
    every = pd.concat(values).replace(0, np.nan).dropna()
    lo, hi = (max(float(every.min()) / 1.6, 0.01), float(every.max()) * 1.6) if len(every) else (0.01, 100.0)
    for ax, state in zip(axes[0], states):
        part = rows[rows["cache_state"] == state].reset_index(drop=True)
        y = np.arange(len(part))
        for fam in families:
            xs, ys = [], []
            for i, others in enumerate(part["others"]):
                if fam in others:
                    xs.append(100 * max(others[fam], 1e-6))
                    ys.append(i)
            if xs:
                ax.scatter(xs, ys, s=14, marker=FAMILY_MARKERS.get(fam, "x"), facecolors="none",
                           edgecolors="0.55", linewidths=0.8, zorder=2)
        champion = part["is_champion"].astype(bool).to_numpy()
        gm = 100 * part["test_gmae"].clip(lower=1e-8).to_numpy()
        ax.scatter(gm[champion], y[champion], s=30, c="#c44e52", zorder=3)
        ax.scatter(gm[~champion], y[~champion], s=30, c="#4c72b0", zorder=3)
        ax.hlines(y, lo, gm, color="0.85", lw=0.6, zorder=1)
        # a panel of one platform names it in its title, so that its labels stay short and clear of the panel
        # to their left
        platforms = part["platform"].dropna().unique() if "platform" in part else []
        own = {**common, "platform": str(platforms[0])} if len(platforms) == 1 else common
        labels = [f"{row_label(r, own)}  (n={int(r['n_test']) if pd.notna(r['n_test']) else '?'})"
                  for _, r in part.iterrows()]
        ax.set_yticks(y, labels, fontsize=font)
        ax.set_ylim(len(part) - 0.5, -0.5)
        ax.set_xscale("log")
        ax.set_xlim(lo, hi)
        ax.xaxis.set_major_formatter(LogFormatter())  # plain '10', '6', '20' (not 10^1, 6x10^0)
        ax.xaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
        ax.grid(True, axis="x", which="major", alpha=0.4)
        for mark in (10, 25):
            if lo < mark < hi:
                ax.axvline(mark, color="0.6", ls=":", lw=0.8)
        ax.set_xlabel("held-out test GMAE (%), log scale", fontsize=8)
        ax.tick_params(axis="x", which="both", labelsize=7)
        where = f", {platforms[0]}" if len(platforms) == 1 and "platform" not in common else ""
        ax.set_title(f"{state}{where}\n{len(part)} models, worst first", fontsize=9)
    if set(common) - {"platform"}:  # a figure-level label: the constrained layout keeps room for it
        fig.supxlabel("implementation / dtype unless named: " + " ".join(
            v for k, v in common.items() if k != "platform"), fontsize=7, color="0.4", x=0.005, ha="left")
    handles = [plt.Line2D([], [], ls="", marker="o", color="#c44e52", label="champion"),
               plt.Line2D([], [], ls="", marker="o", color="#4c72b0", label="latest (no champion)")]
    handles += [plt.Line2D([], [], ls="", marker=FAMILY_MARKERS.get(f, "x"), markerfacecolor="none",
                           markeredgecolor="0.55", label=f"{f} (other family)") for f in families]
    fig.legend(handles=handles, loc="outside upper center", ncol=ncol, fontsize=7, frameon=False)
    with warnings.catch_warnings():  # long model names: matplotlib keeps the layout it can and says so on stderr
        warnings.simplefilter("ignore", UserWarning)
        fig.savefig(path, dpi=DPI, metadata={"Description": json.dumps([str(n) for n in rows["name"]])})
    plt.close(fig)
    return Path(path)
