"""The generic kernel-measurement format: bring your own GPU microbenchmarks as CSV (optionally gzipped) or Parquet.

Columns, found by name (case-insensitive; order does not matter; extra columns are parameters):

- ``op`` (required): a pmdb op name (``fully_connected``, ``bmm``, ``conv2d``, ``layer_norm``, ``softmax``, ``add``,
  ...; see ``pmdb collect ops --list``). GEMM aliases ``linear``, ``mm``, ``addmm``, ``matmul`` become
  ``fully_connected``, ``ln`` becomes ``layer_norm``, ``conv`` becomes ``conv2d``.
- the time (required), one of: ``time_us``, ``time_ms``, ``time_ns``, ``time_s``; or ``time`` with a ``unit`` column
  (us, ms, ns or s per row). It is the measurement's central value (median or mean of repetitions).
- ``pass`` (fwd or bwd, default fwd), ``dtype`` (default float32), ``implementation`` (default torch),
  ``device`` (a GPU name such as 'NVIDIA L4', or 'cuda:N' / 'cpu'), ``kernel`` (kernel name), ``repetitions``,
  ``std_<unit>`` (optional).
- every other column is a parameter of the op in pmdb's names (fully_connected: M rows, K reduced, N out; bmm: B, M,
  N, K; conv2d: B, H (input side incl. padding), IC, OC, FH, FW, stride, pad, ...), a number. An empty cell means
  the row's op has no such parameter; an op of pmdb's catalogue must have all of its parameters, and may not change
  a fixed one (fully_connected's B is 1).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from collectors.importers.common import import_error, normalize_dtype
from collectors.importers.ops_common import FirstError, ParsedOps, Table, params_json, rows_frame
from pmdb.errors import PmdbError

FORMAT = "generic"
UNITS_PER_US = {"us": 1.0, "µs": 1.0, "ms": 1e-3, "ns": 1e3, "s": 1e-6}
ALIASES = {"linear": "fully_connected", "mm": "fully_connected", "addmm": "fully_connected",
           "matmul": "fully_connected", "ln": "layer_norm", "conv": "conv2d"}
_FIELDS = {"op", "pass", "dtype", "implementation", "device", "kernel", "repetitions", "time", "unit"}
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _catalogue_params(op: str) -> tuple[set[str], dict[str, float]] | None:
    """(parameter names, fixed values) of a catalogue op, or None for an op the catalogue does not have (or whose
    inputs are lists, such as embedding lookups: not importable here)."""
    from collectors.ops import catalogue

    try:
        spec = catalogue.get(op)
    except PmdbError:
        return None
    if spec.check_config is not None:
        return None
    return {a.name for a in spec.axes}, dict(spec.fixed)


def parse(path: Path, table: Table) -> ParsedOps:
    """Parse a generic CSV/Parquet file into rows (times in µs); one error on the earliest bad line."""
    lower: dict[str, str] = {}
    for column in table.columns:
        if column.lower() in lower:
            raise import_error(path, table.header_line or None,
                               f"columns {lower[column.lower()]!r} and {column!r} differ only in case")
        lower[column.lower()] = column
    if "op" not in lower:
        raise import_error(path, table.header_line or None, f"no 'op' column (columns: {', '.join(table.columns)})")
    timed = [c for c in lower if c.startswith("time_") and c[5:] in UNITS_PER_US]
    if len(timed) + ("time" in lower) != 1:
        raise import_error(path, table.header_line or None,
                           "give exactly one time column: time_us, time_ms, time_ns, time_s, or time with a unit "
                           "column (us, ms, ns or s)")
    if "time" in lower and "unit" not in lower:
        raise import_error(path, table.header_line or None, "a 'time' column needs a 'unit' column (us, ms, ns or s)")
    stds = [c for c in lower if c.startswith("std_") and c[4:] in UNITS_PER_US]
    param_cols = [lower[c] for c in lower if c not in _FIELDS and c not in timed and c not in stds]
    bad_names = [c for c in param_cols if not _NAME.match(c)]
    if bad_names:
        raise import_error(path, table.header_line or None,
                           f"parameter column name(s) {', '.join(map(repr, bad_names))}: use letters, digits and '_'")
    errors = FirstError(table)
    count = len(table)

    def text(name: str, default: str = "") -> np.ndarray:
        return table.text(lower[name]).to_numpy(dtype=object) if name in lower else np.full(count, default, object)

    raw_ops = text("op")
    ops = pd.Series(raw_ops).map(lambda o: ALIASES.get(o, o)).to_numpy(dtype=object)
    errors.flag(~pd.Series(ops).str.match(_NAME).to_numpy(dtype=bool),
                lambda i: f"op {raw_ops[i]!r} is not an op name")
    passes = np.where(text("pass") == "", "fwd", text("pass"))
    errors.flag(~np.isin(passes, ["fwd", "bwd"]), lambda i: f"pass is {passes[i]!r}: use fwd or bwd")
    if timed:
        per_us = np.full(count, UNITS_PER_US[timed[0][5:]])
        time_col = lower[timed[0]]
    else:
        units = np.array([u.lower() for u in text("unit")], dtype=object)
        errors.flag(~np.isin(units, list(UNITS_PER_US)), lambda i: f"unit is {units[i]!r}: use us, ms, ns or s")
        per_us = np.array([UNITS_PER_US.get(u, 1.0) for u in units])
        time_col = lower["time"]
    time_us = table.numbers(time_col, errors, positive=True) / per_us
    std_us = np.full(count, np.nan)
    if stds:
        std_us = table.numbers(lower[stds[0]], errors, optional=True) / UNITS_PER_US[stds[0][4:]]
    repetitions = np.full(count, np.nan)
    if "repetitions" in lower:
        repetitions = table.numbers(lower["repetitions"], errors, optional=True)
        errors.flag(np.isfinite(repetitions) & (np.mod(repetitions, 1) != 0),
                    lambda i: f"repetitions is {repetitions[i]!r}: must be a whole number")
    params = {c: table.numbers(c, errors, optional=True) for c in param_cols}
    present = pd.DataFrame({c: ~np.isnan(v) for c, v in params.items()}, index=range(count))

    fixed_of: dict[str, dict[str, float]] = {}
    for op in pd.unique(ops):
        rows = ops == op
        known = _catalogue_params(op)
        if known is None:
            fixed_of[op] = {}
            errors.flag(rows & ~present.any(axis=1).to_numpy(), lambda i: f"{ops[i]}: no parameter columns with values")
            continue
        needed, fixed = known
        fixed_of[op] = fixed
        for name in sorted(needed):
            if name not in params:
                errors.flag(rows, lambda i, n=name: f"{ops[i]} needs parameter {n} (no {n} column)")
            else:
                errors.flag(rows & ~present[name].to_numpy(), lambda i, n=name: f"{ops[i]} needs parameter {n}")
        for name, value in fixed.items():
            if name in params:
                clash = rows & present[name].to_numpy() & (params[name] != value)
                errors.flag(clash, lambda i, n=name, v=value: f"{ops[i]}: {n} is fixed at {v:g}, not "
                                                              f"{params[n][i]:g}")

    devices = text("device")
    local = np.array([d.startswith(("cuda", "cpu")) for d in devices], dtype=bool)
    gpu_names = devices[~local & (devices != "")]
    device_name = str(gpu_names[0]) if len(gpu_names) else None
    if device_name is not None:
        errors.flag(~local & (devices != "") & (devices != device_name),
                    lambda i: f"device {devices[i]!r} differs from {device_name!r} above: one file holds one GPU's "
                              f"rows")
    errors.raise_first()

    config = np.empty(count, dtype=object)
    stored = np.empty(count, dtype=object)
    keys = [pd.Series(ops)] + [present[c] for c in param_cols]
    for key, index in pd.DataFrame({str(i): k for i, k in enumerate(keys)}).groupby(
            [str(i) for i in range(len(keys))], sort=False).indices.items():
        key = key if isinstance(key, tuple) else (key,)
        op, have = key[0], [c for c, on in zip(param_cols, key[1:]) if on]
        values: dict[str, np.ndarray | float] = {**fixed_of[op], **{c: params[c][index] for c in have}}
        config[index], stored[index] = params_json(values, len(index))
    kernels = text("kernel")
    dtypes = {d: normalize_dtype(d) or "float32" for d in set(text("dtype"))}
    frame = rows_frame(count, op=ops, **{"pass": passes}, config=config, params=stored, median_us=time_us,
                       std_us=std_us, repetitions=repetitions,
                       implementation=np.where(text("implementation") == "", "torch", text("implementation")),
                       dtype=np.array([dtypes[d] for d in text("dtype")], dtype=object),
                       device=np.where(local, devices, ""),
                       kernels=np.array([None if not k else '[{"name": ' + json.dumps(k) + "}]" for k in kernels],
                                        dtype=object))
    return ParsedOps(path=path, format=FORMAT, rows=frame, device_name=device_name)

