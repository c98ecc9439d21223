"""The generic kernel-measurement format: bring your own GPU microbenchmarks as CSV (optionally gzipped) or Parquet.

Columns, found by name (case-insensitive; order does not matter; extra columns are parameters):

- ``op`` (required): a pmdb op name (``fully_connected``, ``bmm``, ``conv2d``, ``layer_norm``, ``softmax``, ``add``,
  ...; see ``pmdb collect ops --list``). GEMM aliases ``linear``, ``mm``, ``addmm``, ``matmul`` become
  ``fully_connected``, ``ln`` becomes ``layer_norm``, ``conv`` becomes ``conv2d``.
- the time (required), one of: ``time_us``, ``time_ms``, ``time_ns``, ``time_s``; or ``time`` with a ``unit`` column
  (us, ms, ns or s per row). It is the measurement's central value (median or mean of repetitions).
- ``pass`` (fwd or bwd, default fwd), ``dtype`` (default float32), ``implementation`` (default torch),
  ``device`` (a GPU name such as 'NVIDIA L4', or 'cuda:N'), ``kernel`` (kernel name), ``repetitions``, ``std_<unit>``
  (optional).
- every other column is a parameter of the op in pmdb's names (fully_connected: M rows, K reduced, N out; bmm: B, M,
  N, K; conv2d: B, H (input side incl. padding), IC, OC, FH, FW, stride, pad, ...). An empty cell means the row's op
  has no such parameter; a catalogue op must have all of its parameters.
"""
from __future__ import annotations

from pathlib import Path

from collectors.importers.common import import_error, normalize_dtype
from collectors.importers.ops_common import OpRow, ParsedOps, Table, as_param, number
from pmdb.errors import PmdbError

FORMAT = "generic"
UNITS_PER_US = {"us": 1.0, "µs": 1.0, "ms": 1e-3, "ns": 1e3, "s": 1e-6}
ALIASES = {"linear": "fully_connected", "mm": "fully_connected", "addmm": "fully_connected",
           "matmul": "fully_connected", "ln": "layer_norm", "conv": "conv2d"}
_FIELDS = {"op", "pass", "dtype", "implementation", "device", "kernel", "repetitions", "time", "unit"}


def _required_params(op: str) -> tuple[set[str], dict[str, float]] | None:
    """(parameter names, fixed values) of a catalogue op, or None for an op the catalogue does not have."""
    from collectors.ops import catalogue

    try:
        spec = catalogue.get(op)
    except PmdbError:
        return None
    if spec.make_configs is not None or spec.check_config is not None:
        return None  # ops with their own generator (embedding lookups) take list-valued inputs: not importable here
    return {a.name for a in spec.axes}, dict(spec.fixed)


def parse(path: Path, table: Table) -> ParsedOps:
    """Parse a generic CSV/Parquet file into rows (times in µs)."""
    lower = {c.lower(): c for c in table.columns}
    if "op" not in lower:
        raise import_error(path, 1, f"no 'op' column (columns: {', '.join(table.columns)})")
    timed = [c for c in lower if c.startswith("time_") and c[5:] in UNITS_PER_US]
    if len(timed) + ("time" in lower) != 1:
        raise import_error(path, 1, "give exactly one time column: time_us, time_ms, time_ns, time_s, or time with "
                                    "a unit column")
    if "time" in lower and "unit" not in lower:
        raise import_error(path, 1, "a 'time' column needs a 'unit' column (us, ms, ns or s)")
    time_col = lower[timed[0]] if timed else lower["time"]
    stds = [c for c in lower if c.startswith("std_") and c[4:] in UNITS_PER_US]
    params_cols = [c for c in table.columns if c.lower() not in _FIELDS and c.lower() not in timed
                   and c.lower() not in stds]
    checked: dict[str, tuple[set[str], dict[str, float]] | None] = {}
    rows: list[OpRow] = []
    devices: set[str] = set()
    for line, values in table.records():
        op = values[lower["op"]].strip()
        op = ALIASES.get(op, op)
        if not op or not op.replace("_", "").isalnum():
            raise import_error(path, line, f"op {values[lower['op']]!r} is not an op name")
        pass_ = values.get(lower.get("pass", ""), "") or "fwd"
        if pass_ not in ("fwd", "bwd"):
            raise import_error(path, line, f"pass is {pass_!r}: use fwd or bwd")
        unit = timed[0][5:] if timed else values[lower["unit"]].strip().lower()
        if unit not in UNITS_PER_US:
            raise import_error(path, line, f"unit is {unit!r}: use us, ms, ns or s")
        time_us = number(path, line, values[time_col], time_col, positive=True) / UNITS_PER_US[unit]
        params = {c: as_param(number(path, line, values[c], c)) for c in params_cols if values[c] != ""}
        if op not in checked:
            checked[op] = _required_params(op)
        if checked[op] is not None:
            needed, fixed = checked[op]
            params = {**fixed, **params}
            missing = sorted(needed - set(params))
            if missing:
                raise import_error(path, line, f"{op} needs parameter(s) {', '.join(missing)}")
        elif not params:
            raise import_error(path, line, f"{op}: no parameter columns with values")
        device = values.get(lower.get("device", ""), "").strip()
        if device and not device.startswith(("cuda", "cpu")):
            devices.add(device)
        std_us = None
        if stds and values[lower[stds[0]]] != "":
            std_us = number(path, line, values[lower[stds[0]]], stds[0]) / UNITS_PER_US[stds[0][4:]]
        reps = values.get(lower.get("repetitions", ""), "")
        kernel = values.get(lower.get("kernel", ""), "").strip()
        rows.append(OpRow(op=op, pass_=pass_, params=params, time_us=time_us, line=line,
                          dtype=normalize_dtype(values.get(lower.get("dtype", ""), "")) or "float32",
                          implementation=values.get(lower.get("implementation", ""), "") or "torch",
                          device=device if device.startswith(("cuda", "cpu")) else "",
                          kernels=[{"name": kernel}] if kernel else None,
                          repetitions=int(number(path, line, reps, "repetitions")) if reps else None,
                          std_us=std_us))
    if len(devices) > 1:
        raise import_error(path, None, f"rows from several devices ({', '.join(sorted(devices))})")
    return ParsedOps(path=path, format=FORMAT, rows=rows, device_name=devices.pop() if devices else None)
