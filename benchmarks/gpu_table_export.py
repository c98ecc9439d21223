"""One GPU's measured kernel rows as a kernel table other stores import: what `pmdb collect ops` timed on a lent GPU,
written in pmdb's generic kernel-table format so that a machine without that GPU adds it as a cross-GPU source
(`pmdb platform-specs SHEET --name NAME`, then `pmdb collect import-ops DIR --format generic --platform NAME`).

Writes, under OUT:

- ``kernels.csv.gz``: op, pass, dtype, implementation, device (the GPU's name), time_us (the kernels' device time per
  call, the profiler's, ``median_us``) and one column per parameter (empty where the op has no such parameter);
- ``timings.csv.gz``: the same rows' three timings side by side (device time, one call between events, back to
  back; µs) with their params as JSON, for the burst/sustained diagnosis;
- ``rows.txt``: rows per op and pass.

    python benchmarks/gpu_table_export.py WORKSPACE OUT [--platform NAME] [--cache-state device]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pmdb.config import Workspace  # noqa: E402
from pmdb.errors import PmdbError  # noqa: E402
from pmdb.store import Store  # noqa: E402

FIELDS = ("op", "pass", "dtype", "implementation", "device")


def local_platform(store: Store) -> str:
    """The store's own machine (the platform `pmdb platform` detected), the one a lent GPU's rows were timed on."""
    frame = store.query("SELECT name FROM platforms WHERE NOT is_imported ORDER BY name")
    if len(frame) != 1:
        raise PmdbError(f"the store has {len(frame)} detected platforms: give --platform")
    return str(frame["name"].iloc[0])


def rows_of(store: Store, platform: str, cache_state: str) -> pd.DataFrame:
    """The platform's completed measurement rows in ``cache_state`` (µs), oldest first."""
    return store.query(
        "SELECT op, pass, dtype, implementation, device, config_key, CAST(params AS VARCHAR) AS params, "
        "median_us, single_call_us, back_to_back_us FROM v_op_measurements WHERE platform = ? AND cache_state = ? "
        "AND median_us > 0 ORDER BY measurement_id", [platform, cache_state])


def generic_table(rows: pd.DataFrame, device_name: str) -> pd.DataFrame:
    """``rows`` in the generic format: the fields, time_us and one numeric column per parameter."""
    params = pd.DataFrame([json.loads(p) for p in rows["params"]], index=rows.index)
    numeric = params.apply(pd.to_numeric, errors="coerce")
    table = rows[list(FIELDS)].copy()
    table["device"] = device_name
    table["time_us"] = rows["median_us"].astype(float)
    return pd.concat([table, numeric[sorted(numeric.columns)]], axis=1)


def export(home: Path, out: Path, platform: str | None = None, cache_state: str = "device") -> pd.DataFrame:
    """Write the three files for ``platform`` (default: the store's detected machine); returns rows per op."""
    with Store.open(Workspace(home), read_only=True) as store:
        name = platform or local_platform(store)
        gpu = store.scalar("SELECT coalesce(gpu_name, name) FROM platforms WHERE name = ?", [name])
        if gpu is None:
            raise PmdbError(f"no platform {name!r} in {home}")
        rows = rows_of(store, name, cache_state)
    if rows.empty:
        raise PmdbError(f"platform {name!r} has no {cache_state} rows in {home}")
    out.mkdir(parents=True, exist_ok=True)
    generic_table(rows, str(gpu)).to_csv(out / "kernels.csv.gz", index=False, compression="gzip")
    timings = rows[["op", "pass", "config_key", "params", "median_us", "single_call_us", "back_to_back_us"]]
    timings.to_csv(out / "timings.csv.gz", index=False, compression="gzip")
    counts = rows.groupby(["op", "pass"]).size().rename("rows").reset_index()
    (out / "rows.txt").write_text(f"{gpu} ({name}), cache state {cache_state}\n" + counts.to_string(index=False) + "\n")
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("workspace", type=Path, help="the pmdb workspace the rows were collected into")
    parser.add_argument("out", type=Path, help="directory to write kernels.csv.gz, timings.csv.gz and rows.txt to")
    parser.add_argument("--platform", help="platform whose rows to export (default: the detected machine)")
    parser.add_argument("--cache-state", default="device", help="device (GPU rows, default), warm or cold")
    args = parser.parse_args(argv)
    try:
        counts = export(args.workspace, args.out, args.platform, args.cache_state)
    except PmdbError as err:
        print(f"gpu_table_export.py: {err}", file=sys.stderr)
        return 2
    print(counts.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
