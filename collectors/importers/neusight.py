"""NeuSight kernel tables (sitar-lab/NeuSight, ``<GPU>/<op>.csv.gz``): one row per measured forward kernel
configuration, fp32, latency in **milliseconds**. Columns are found by their header names: ``OPName``, ``Latency``,
``Device``, software versions (``Torch Version``, ``CUDA Version``, ``CUDNN Version``), ``Kernel Name``, launch
geometry (``Grid x/y/z``, ``Block x/y/z``, ``Warps per SM``, ``Blocks per SM``), the optional ``Kernels`` list, then
the op's shape columns.

Mapping onto pmdb's op vocabulary (``collectors/ops``) and parameters:

| NeuSight              | pmdb op                        | params                                              |
|-----------------------|--------------------------------|-----------------------------------------------------|
| linear B, M, N, K     | fully_connected                | M = B·M rows, K = N (in), N = K (out), B = 1        |
| bmm B, M, N, K        | bmm                            | B, M, K = N (reduced), N = K (out)                  |
| add, mul, div, pow    | add, mul, div, pow             | M = B, N = H (tensor ⊕ tensor)                      |
| addu, mulu, divu, powu| add_scalar, mul_scalar, div_scalar, pow_scalar | M = B, N = H (tensor ⊕ scalar)      |
| gelu, relu, tanh      | gelu, relu, tanh               | M = B, N = H                                        |
| softmax B, H          | softmax                        | M = B, N = H (over H)                               |
| ln B, H               | layer_norm                     | B = 1, M = B, N = H (over H)                        |
| conv B, Input_Channel, Output_Channel, Kernel_Szie (sic), Input_Size, Stride, Padding | conv2d | B, IC, OC, FH = FW = kernel, stride, pad, dilation 1, is_depthwise 0, H = Input_Size + 2·Padding |

NeuSight's GEMM columns name the reduced dimension N and the output columns K: in the tables the first grid
dimension of cuBLAS's ``*_tn``/``*_nn`` kernels is ceil(K / tile), e.g. V100 linear M=176, N=105, K=12518 runs
``volta_sgemm_128x64_tn`` on a 98 x 3 grid (12518 / 128 -> 98, 176 / 64 -> 3); hence the swap.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from collectors.importers.common import import_error
from collectors.importers.ops_common import OpRow, ParsedOps, Table, as_param, number

FORMAT = "neusight"
REQUIRED = ("OPName", "Latency")
_GEOMETRY = {"Grid x": "grid_x", "Grid y": "grid_y", "Grid z": "grid_z", "Block x": "block_x", "Block y": "block_y",
             "Block z": "block_z", "Warps per SM": "warps_per_sm", "Blocks per SM": "blocks_per_sm"}
_SOFTWARE = {"Torch Version": "torch", "CUDA Version": "cuda", "CUDNN Version": "cudnn"}


def _gemm(v: dict[str, float]) -> dict[str, float]:
    return {"B": 1, "M": v["B"] * v["M"], "N": v["K"], "K": v["N"]}


def _bmm(v: dict[str, float]) -> dict[str, float]:
    return {"B": v["B"], "M": v["M"], "N": v["K"], "K": v["N"]}


def _rows_cols(v: dict[str, float]) -> dict[str, float]:
    return {"M": v["B"], "N": v["H"]}


def _ln(v: dict[str, float]) -> dict[str, float]:
    return {"B": 1, "M": v["B"], "N": v["H"]}


def _conv(v: dict[str, float]) -> dict[str, float]:
    k, pad = v["Kernel_Szie"], v["Padding"]
    return {"B": v["B"], "IC": v["Input_Channel"], "OC": v["Output_Channel"], "FH": k, "FW": k,
            "H": v["Input_Size"] + 2 * pad, "stride": v["Stride"], "pad": pad, "dilation": 1, "is_depthwise": 0}


_GEMM_COLS = ("B", "M", "N", "K")
_BH = ("B", "H")
_CONV_COLS = ("B", "Input_Channel", "Output_Channel", "Kernel_Szie", "Input_Size", "Stride", "Padding")
# NeuSight OPName -> (pmdb op, shape columns, mapping)
OPS: dict[str, tuple[str, tuple[str, ...], Callable[[dict[str, float]], dict[str, float]]]] = {
    "linear": ("fully_connected", _GEMM_COLS, _gemm), "bmm": ("bmm", _GEMM_COLS, _bmm),
    **{name: (name, _BH, _rows_cols) for name in ("add", "mul", "div", "pow", "gelu", "relu", "tanh", "softmax")},
    **{f"{name}u": (f"{name}_scalar", _BH, _rows_cols) for name in ("add", "mul", "div", "pow")},
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


def _kernels(values: dict[str, str], columns: list[str], path: Path, line: int) -> list[dict[str, Any]] | None:
    name = values.get("Kernel Name", "")
    if not name and "Kernels" not in values:
        return None
    main: dict[str, Any] = {"name": name}
    for column, key in _GEOMETRY.items():
        if column in values and values[column] != "":
            main[key] = as_param(number(path, line, values[column], column))
    out = [main] if name else []
    for other in (k for k in values.get("Kernels", "").split(";") if k.strip()):
        if other != name:
            out.append({"name": other})
        elif not out:
            out.append(main)
    return out or None


def parse(path: Path, table: Table) -> ParsedOps:
    """Parse one NeuSight table into rows of pmdb ops (times in µs)."""
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise import_error(path, 1, f"not a NeuSight kernel table: no {', '.join(missing)} column "
                                    f"(columns: {', '.join(table.columns)})")
    rows: list[OpRow] = []
    devices: set[str] = set()
    software: dict[str, str] = {}
    for line, values in table.records():
        name = values["OPName"]
        if name not in OPS:
            raise import_error(path, line, f"NeuSight op {name!r} has no pmdb mapping (known: {', '.join(OPS)})")
        op, columns, mapping = OPS[name]
        absent = [c for c in columns if c not in values]
        if absent:
            raise import_error(path, line, f"{name} needs column(s) {', '.join(absent)}")
        shape = {c: number(path, line, values[c], c) for c in columns}
        zero = [c for c in columns if shape[c] == 0 and c not in ("Padding",)]
        if zero:
            raise import_error(path, line, f"{name}: {', '.join(zero)} must be positive")
        latency_ms = number(path, line, values["Latency"], "Latency", positive=True)
        if values.get("Device"):
            devices.add(values["Device"])
        for column, key in _SOFTWARE.items():
            if values.get(column):
                software[key] = _version(key, values[column])
        rows.append(OpRow(op=op, pass_="fwd", params={k: as_param(v) for k, v in mapping(shape).items()},
                          time_us=latency_ms * 1000.0, line=line,
                          kernels=_kernels(values, table.columns, path, line)))
    if len(devices) > 1:
        raise import_error(path, None, f"rows from several devices ({', '.join(sorted(devices))})")
    return ParsedOps(path=path, format=FORMAT, rows=rows, device_name=devices.pop() if devices else None,
                     software=software)
