"""Operand layouts of a traced matrix product: which operands are stored transposed, read from the strides an
execution trace records (``attrs['input_strides']``, chakra ET 1.0.3+; absent in Kineto-only traces).

A [..., rows, cols] operand is *transposed* when its rows are the fastest-varying dimension (stride 1) and its
columns are not: the transposed view of a row-major [..., cols, rows] tensor (``z.transpose(1, 2)``). The bmm
parameters are ``AT`` (first operand) and ``BT`` (second), 1 when transposed and absent otherwise; an op whose
strides were not recorded, or whose operand is too thin to tell (one row or one column), is priced row-major.
"""
from __future__ import annotations

from typing import Any

LAYOUT = ("AT", "BT")   # bmm parameters: first / second operand stored transposed (1); absent = row-major (0)


def stored(shape: Any, strides: Any) -> str | None:
    """How a >= 2-d operand of ``shape`` with ``strides`` (elements) is stored in its last two dimensions:
    'transposed' (rows fastest), 'row-major' (columns fastest), or None when the strides are missing or malformed,
    the operand too thin to tell (one row or one column), or neither holds."""
    if not (isinstance(shape, list) and isinstance(strides, list)) or len(shape) < 2 or len(shape) != len(strides):
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in [*shape[-2:], *strides[-2:]]):
        return None
    rows, cols = shape[-2], shape[-1]
    if rows < 2 or cols < 2:
        return None
    if strides[-2] == 1 and strides[-1] >= rows:
        return "transposed"
    if strides[-1] == 1 and strides[-2] >= cols:
        return "row-major"
    return None


def transposed(shape: Any, strides: Any) -> bool:
    """True when the operand is stored transposed (:func:`stored`); False otherwise or when it cannot be told."""
    return stored(shape, strides) == "transposed"


def layout_params(strides: Any, shapes: list[Any], args: tuple[int, int]) -> dict[str, float]:
    """``{'AT': 1.0}`` / ``{'BT': 1.0}`` for the operands at input positions ``args`` that are stored transposed,
    given an op's recorded input strides (``attrs['input_strides']``; empty when both are row-major or no strides
    were recorded)."""
    if not isinstance(strides, list):
        return {}
    out = {}
    for name, arg in zip(LAYOUT, args):
        if arg < len(shapes) and arg < len(strides) and transposed(shapes[arg], strides[arg]):
            out[name] = 1.0
    return out


def backward_layout(gemms: list[tuple[list[Any], Any]], m: int, n: int) -> dict[str, float]:
    """The forward bmm's layout read from the gradient GEMMs its autograd node ran, each given as (input shapes,
    input strides); ``m``, ``n``: the output gradient's last two dimensions. ``grad · mat2^T`` (its first operand
    [.., m, n]) tells the forward's second operand: stored transposed when ``mat2^T`` runs row-major (the transpose
    of a transposed view); ``self^T · grad`` (its second operand [.., m, n]) tells the first. A GEMM whose two
    operands both look like the gradient (a square shape) tells nothing, nor one without strides."""
    out = {}
    for shapes, strides in gemms:
        if not (isinstance(shapes, list) and isinstance(strides, list)) or len(shapes) < 2 or len(strides) < 2:
            continue
        first, second = (list(s[-2:]) if isinstance(s, list) else None for s in shapes[:2])
        if first == [m, n] and second != [m, n] and stored(shapes[1], strides[1]) == "row-major":
            out["BT"] = 1.0
        elif second == [m, n] and first != [m, n] and stored(shapes[0], strides[0]) == "row-major":
            out["AT"] = 1.0
    return out
