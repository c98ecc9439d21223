"""NeuSight kernel tables (sitar-lab/NeuSight, ``<GPU>/<op>.csv.gz``): one row per measured forward kernel
configuration, fp32, latency in **milliseconds** (stored as µs, see Times below). Columns are found by their
header names: ``OPName``, ``Latency``, ``Device``, software versions (``Torch Version``, ``CUDA Version``,
``CUDNN Version``), ``Kernel Name``, launch geometry (``Grid x/y/z``, ``Block x/y/z``, ``Warps per SM``,
``Blocks per SM``), the optional ``Kernels`` list (every kernel the op launched, in order, ';'-separated), then the
op's shape columns.

Mapping onto pmdb's op vocabulary (``collectors/ops``) and parameters:

| NeuSight                | pmdb op          | params                                                          |
|-------------------------|------------------|-----------------------------------------------------------------|
| linear B, M, N, K       | fully_connected  | M = B·M rows, K = N (reduced: in features), N = K (out), B = 1  |
| bmm B, M, N, K          | bmm              | B, M, K = N (reduced), N = K (out)                              |
| add, mul                | add, mul         | M = B, N = H (tensor ⊕ tensor, as pmdb's add and mul)           |
| addu, mulu              | add_scalar, mul_scalar | M = B, N = H (tensor ⊕ scalar)                            |
| divu, powu              | div, pow         | M = B, N = H (tensor ⊕ scalar: pmdb's div is torch.div(x, 3.0), |
|                         |                  | fitters.opcost's pow reads one tensor)                          |
| div, pow                | div_tensor, pow_tensor | M = B, N = H (tensor ⊕ tensor: not pmdb's div and pow)    |
| gelu, relu, tanh        | gelu, relu, tanh | M = B, N = H                                                    |
| softmax B, H            | softmax          | M = B, N = H (over H)                                           |
| ln B, H                 | layer_norm       | B = 1, M = B, N = H (over H)                                    |
| conv (see below)        | conv2d           | B, IC, OC, FH = FW = kernel, stride, pad, dilation 1,           |
|                         |                  | is_depthwise 0, H = Input_Size + 2·Padding (pmdb's H is padded) |

conv's columns: B, Input_Channel, Output_Channel, Kernel_Szie (sic), Input_Size, Stride, Padding.

The names follow pmdb's meaning of each op, which the NeuSight names do not always share: its ``div`` and ``pow``
divide / raise by a tensor (kernels ``BinaryFunctor<DivFunctor>``, ``pow_tensor_tensor_kernel``), its ``divu`` and
``powu`` by a scalar (``BUnaryFunctor<MulFunctor>``, ``pow_tensor_scalar_kernel``), and pmdb's ``div`` is the
optimizer's x / scalar (``collectors/ops/elementwise.py``).

NeuSight's GEMM columns name the reduced dimension N and the output columns K (not M×K by K×N): in every row of the
five GPUs' ``linear`` and ``bmm`` tables whose kernel is a cuBLAS ``*sgemm_<tileM>x<tileN>*`` one, Grid x is
ceil(K / tileM) and Grid y ceil(M / tileN) (bmm: Grid z is B in all but ~40 of 87k rows), e.g. V100 linear M=176, N=105, K=12518 runs
``volta_sgemm_128x64_tn`` on a 98 x 3 grid (12518 / 128 -> 98, 176 / 64 -> 3); hence the swap.

``kernels`` keeps the launch: the ``Kernels`` list in order, the entry named by ``Kernel Name`` (compared without
case) carrying the launch geometry and ``"main": true`` (first when the list lacks it). Software versions go to the
platform row (torch, CUDA) and the run summary (with cuDNN).

Times: each row's ``Latency`` is ONE call timed between two CUDA events, so it holds the table host's per-call
floor. It is kept as ``single_call_us``; ``median_us`` is the kernel's device time with the floor removed, and the
table's floor and the part removed go to ``host_floor_us`` and ``host_lead_us`` (per file and op:
:mod:`collectors.importers.launch_floor`; an import of several tables settles them together, a table without a
plateau taking the import's floor, ``launch_floor.settle_import``).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from collectors.importers import launch_floor
from collectors.importers.common import import_error
from collectors.importers.ops_common import FirstError, ParsedOps, Table, number_text, params_json, rows_frame

FORMAT = "neusight"
REQUIRED = ("OPName", "Latency")
_GEOMETRY = {"Grid x": "grid_x", "Grid y": "grid_y", "Grid z": "grid_z", "Block x": "block_x", "Block y": "block_y",
             "Block z": "block_z", "Warps per SM": "warps_per_sm", "Blocks per SM": "blocks_per_sm"}
_SOFTWARE = {"Torch Version": "torch", "CUDA Version": "cuda", "CUDNN Version": "cudnn"}

Shape = dict[str, np.ndarray]


def _gemm(v: Shape) -> Shape:
    return {"B": 1, "M": v["B"] * v["M"], "N": v["K"], "K": v["N"]}


def _bmm(v: Shape) -> Shape:
    return {"B": v["B"], "M": v["M"], "N": v["K"], "K": v["N"]}


def _rows_cols(v: Shape) -> Shape:
    return {"M": v["B"], "N": v["H"]}


def _ln(v: Shape) -> Shape:
    return {"B": 1, "M": v["B"], "N": v["H"]}


def _conv(v: Shape) -> Shape:
    k, pad = v["Kernel_Szie"], v["Padding"]
    return {"B": v["B"], "IC": v["Input_Channel"], "OC": v["Output_Channel"], "FH": k, "FW": k,
            "H": v["Input_Size"] + 2 * pad, "stride": v["Stride"], "pad": pad, "dilation": 1, "is_depthwise": 0}


_GEMM_COLS = ("B", "M", "N", "K")
_BH = ("B", "H")
_CONV_COLS = ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding")
_MAY_BE_ZERO = {"Padding"}
# NeuSight OPName -> (pmdb op, shape columns, mapping onto pmdb's params)
OPS: dict[str, tuple[str, tuple[str, ...], Callable[[Shape], Shape]]] = {
    "linear": ("fully_connected", _GEMM_COLS, _gemm), "bmm": ("bmm", _GEMM_COLS, _bmm),
    **{name: (name, _BH, _rows_cols) for name in ("add", "mul", "gelu", "relu", "tanh", "softmax")},
    "addu": ("add_scalar", _BH, _rows_cols), "mulu": ("mul_scalar", _BH, _rows_cols),
    "divu": ("div", _BH, _rows_cols), "powu": ("pow", _BH, _rows_cols),  # pmdb's div and pow take a scalar
    "div": ("div_tensor", _BH, _rows_cols), "pow": ("pow_tensor", _BH, _rows_cols),
    "ln": ("layer_norm", _BH, _ln), "conv": ("conv2d", _CONV_COLS, _conv),
}


def _version(key: str, text: str) -> str:
    """'p2.1.0' -> '2.1.0', 'cu121' -> '12.1' (as the platforms table writes them); others as written."""
    text = text.strip()
    if key == "torch" and text[:1] == "p" and text[1:2].isdigit():
        return text[1:]
    if key == "cuda" and text.startswith("cu") and text[2:].isdigit() and len(text) >= 5:
        return f"{text[2:-1]}.{text[-1]}"
    return text


def _kernel_entry(name: str) -> str:
    return '{"name": ' + json.dumps(name) + "}"


def _around_main(listed: str, main: str) -> tuple[str, str]:
    """JSON text before and after the main kernel's entry for one (Kernels, Kernel Name) pair."""
    names = [k for k in listed.split(";") if k.strip()]
    at = next((i for i, k in enumerate(names) if k.strip().lower() == main.lower()), None)
    before, after = (names[:at], names[at + 1:]) if at is not None else ([], names)
    return ("[" + "".join(_kernel_entry(k) + ", " for k in before),
            "".join(", " + _kernel_entry(k) for k in after) + "]")


def _kernels(table: Table, errors: FirstError) -> np.ndarray | None:
    """Per row, the JSON text of the kernels list (None where the row names no kernel)."""
    columns = set(table.columns)
    if "Kernel Name" not in columns and "Kernels" not in columns:
        return None
    count = len(table)
    main = table.text("Kernel Name").to_numpy(dtype=object) if "Kernel Name" in columns else np.full(count, "", object)
    listed = table.text("Kernels").to_numpy(dtype=object) if "Kernels" in columns else np.full(count, "", object)
    entry = "{\"name\": " + pd.Series(main).map({n: json.dumps(n) for n in set(main)}).to_numpy(dtype=object)
    for column, key in _GEOMETRY.items():
        if column in columns:
            values = table.numbers(column, errors, optional=True)
            given = ~np.isnan(values)
            text = np.full(count, "", dtype=object)
            if given.any():
                text[given] = f', "{key}": ' + number_text(values[given])
            entry = entry + text
    entry = entry + ', "main": true}'
    pairs = list(zip(listed.tolist(), main.tolist()))
    parts = {pair: _around_main(*pair) for pair in set(pairs)}
    before = np.array([parts[p][0] for p in pairs], dtype=object)
    after = np.array([parts[p][1] for p in pairs], dtype=object)
    out = before + entry + after
    no_main = main == ""
    if no_main.any():  # only the list: its names, no geometry
        lists = pd.Series(listed[no_main]).map(
            lambda text: "[" + ", ".join(_kernel_entry(k) for k in text.split(";") if k.strip()) + "]")
        out[no_main] = np.where(lists == "[]", None, lists)
    return out


def _software(table: Table) -> dict[str, str]:
    found: dict[str, str] = {}
    for column, key in _SOFTWARE.items():
        if column in table.columns:
            values = sorted({_version(key, v) for v in table.text(column).unique() if v})
            if values:
                found[key] = ",".join(values)
    return found


def _device(table: Table, errors: FirstError) -> str | None:
    """The one GPU the file names ('Device'), flagging the first row naming another."""
    if "Device" not in table.columns:
        return None
    devices = table.text("Device")
    named = devices[devices != ""]
    if named.empty:
        return None
    first = str(named.iloc[0])
    errors.flag((devices != "") & (devices != first),
                lambda i: f"Device {devices.iat[i]!r} differs from {first!r} above: one file holds one GPU's rows")
    return first


def parse(path: Path, table: Table) -> ParsedOps:
    """Parse one NeuSight table into rows of pmdb ops (times in µs); one error on the earliest bad line."""
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise import_error(path, table.header_line or None,
                           f"not a NeuSight kernel table: no {', '.join(missing)} column "
                           f"(columns: {', '.join(table.columns)})")
    errors = FirstError(table)
    names = table.text("OPName")
    known = names.isin(OPS).to_numpy()
    errors.flag(~known, lambda i: f"NeuSight op {names.iat[i]!r} has no pmdb mapping (known: {', '.join(OPS)})")
    latency_ms = table.numbers("Latency", errors, positive=True)
    groups: list[tuple[np.ndarray, str, Shape]] = []
    for name in names[known].unique():
        op, columns, mapping = OPS[name]
        rows = (names == name).to_numpy()
        absent = [c for c in columns if c not in table.columns]
        if absent:
            errors.flag(rows, lambda i, n=name, a=absent: f"{n} needs column(s) {', '.join(a)}")
            continue
        shape = {c: table.numbers(c, errors, where=rows) for c in columns}
        for column in columns:
            if column not in _MAY_BE_ZERO:
                errors.flag(rows & (shape[column] == 0), lambda i, n=name, c=column: f"{n}: {c} must be positive")
        groups.append((rows, op, mapping({c: v[rows] for c, v in shape.items()})))
    kernels = _kernels(table, errors)
    device = _device(table, errors)
    errors.raise_first()
    parts = []
    floors = launch_floor.import_floors([latency_ms[rows] * 1000.0 for rows, _, _ in groups])   # per table (op)
    for (rows, op, shape), host in zip(groups, floors):
        count = int(rows.sum())
        config, params = params_json(shape, count)
        latency_us = latency_ms[rows] * 1000.0
        parts.append(rows_frame(count, op=op, config=config, params=params, median_us=host.device_us(latency_us),
                                single_call_us=latency_us, host_floor_us=host.floor_us, host_lead_us=host.lead_us,
                                kernels=None if kernels is None else kernels[rows]).set_index(np.flatnonzero(rows)))
    frame = pd.concat(parts).sort_index().reset_index(drop=True) if parts else rows_frame(0, op=[], config=[],
                                                                                             params=[], median_us=[])
    return ParsedOps(path=path, format=FORMAT, rows=frame, device_name=device, software=_software(table))

