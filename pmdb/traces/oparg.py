"""Reading and rewriting a traced op's arguments by their NAMES in its ``op_schema`` (never by position).

An execution-trace op carries its schema (``fbgemm::bounds_check_indices(Tensor rows_per_table, Tensor(a!)
indices, ...)``), the input shapes in argument order, and the scalar arguments twice: ``attrs["scalars"]`` (argument
index as text -> value) and ``attrs["concrete_inputs"]`` (one text per argument, Kineto's record). The helpers here
look an argument up by name and change its shape or value in all three places at once.
"""
from __future__ import annotations

import ast
from typing import Any, Iterable

from pmdb.traces.graph import Op


def arg_names(schema: str | None) -> list[str]:
    """Argument names of an op schema, in order (``*`` separators dropped)."""
    if not schema or "(" not in schema:
        return []
    body, depth, start, parts = schema[schema.index("(") + 1:], 0, 0, []
    for i, ch in enumerate(body):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                parts.append(body[start:i])
                break
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    names = []
    for part in parts:
        part = part.split("=", 1)[0].strip()
        if part and part != "*":
            names.append(part.split()[-1])
    return names


def fill_missing_schemas(ops: Iterable[Op]) -> int:
    """Give ops without ``op_schema`` (an op the ET and Kineto could not link keeps only Kineto's record) the schema
    another op of the same name carries (a schema belongs to the op name); returns how many were filled."""
    ops = list(ops)
    known = {op.name: op.attrs["op_schema"] for op in ops if op.attrs.get("op_schema")}
    filled = 0
    for op in ops:
        if not op.attrs.get("op_schema") and op.name in known:
            op.attrs["op_schema"] = known[op.name]
            filled += 1
    return filled


def arg_index(op: Op, name: str) -> int | None:
    """Position of argument ``name`` in ``op``'s schema (None when the op has no such argument)."""
    names = arg_names(op.attrs.get("op_schema"))
    return names.index(name) if name in names else None


def get_shape(op: Op, name: str) -> Any:
    """The recorded shape of argument ``name`` (None when absent)."""
    i = arg_index(op, name)
    return op.input_shapes[i] if i is not None and i < len(op.input_shapes) else None


def set_shape(op: Op, name: str, shape: Any) -> bool:
    """Replace the shape of argument ``name``; False when the op has no such argument."""
    i = arg_index(op, name)
    if i is None or i >= len(op.input_shapes):
        return False
    op.input_shapes[i] = shape
    return True


def scalar_at(op: Op, index: int, keep_unparsed: bool = False) -> Any:
    """The value of the scalar argument at ``index`` (ET scalars first, then Kineto's concrete inputs); None when
    absent; a concrete input that is no Python literal is None, or its text with ``keep_unparsed``."""
    scalars = op.attrs.get("scalars")
    if isinstance(scalars, dict) and str(index) in scalars:
        return scalars[str(index)]
    concrete = op.attrs.get("concrete_inputs")
    if isinstance(concrete, list) and index < len(concrete) and concrete[index] not in ("", None):
        value = concrete[index]
        if not isinstance(value, str):
            return value
        try:
            return ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value if keep_unparsed else None
    return None


def get_scalar(op: Op, name: str) -> Any:
    """The value of a scalar argument by name; None when absent."""
    i = arg_index(op, name)
    return None if i is None else scalar_at(op, i, keep_unparsed=True)


def set_scalar(op: Op, name: str, value: Any) -> bool:
    """Set a scalar argument in ``scalars`` and ``concrete_inputs`` where the trace recorded it, else in ``scalars``;
    False only when the op has no such argument."""
    i = arg_index(op, name)
    if i is None:
        return False
    changed = False
    scalars = op.attrs.get("scalars")
    if isinstance(scalars, dict) and str(i) in scalars:
        scalars[str(i)] = value
        changed = True
    concrete = op.attrs.get("concrete_inputs")
    if isinstance(concrete, list) and i < len(concrete) and concrete[i] not in ("", None):
        concrete[i] = str(value)
        changed = True
    if not changed:  # the trace did not record this value (e.g. an op Kineto and the ET could not link): a derived
        op.attrs["scalars"] = {**(scalars if isinstance(scalars, dict) else {}), str(i): value}  # graph states it
    return True


def walk(op: Op) -> list[Op]:
    """The op and all its nested ops (``Op.sub``), depth first."""
    out, stack = [], [op]
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.sub))
    return out


def refresh_children(op: Op) -> None:
    """Rebuild ``op.children`` ((name, input shapes) of every nested op, depth first) from ``op.sub`` when both list
    the same ops (the graph builder may list nested ops that ``sub`` leaves out; then shapes stay as they are)."""
    nested = walk(op)[1:]
    if [name for name, _ in op.children] == [node.name for node in nested]:
        op.children = [(node.name, node.input_shapes) for node in nested]
