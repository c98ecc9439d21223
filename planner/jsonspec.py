"""Validation of small JSON descriptions (systems, models): unknown keys and missing fields are refused by name."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from pmdb import jsonfile
from pmdb.errors import PmdbError

# A field spec: name -> (type or tuple of types, required). Nested objects use a dict spec as the type.
Spec = Mapping[str, tuple[Any, bool]]


def read_json(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``; a PmdbError naming the file when it is missing or not a JSON object."""
    return jsonfile.read_json(path, what, want_object=True)


def check(data: Mapping[str, Any], spec: Spec, where: str) -> None:
    """Refuse unknown keys, missing required fields, wrong types and non-positive numbers, naming the field."""
    unknown = sorted(set(data) - set(spec))
    if unknown:
        raise PmdbError(f"{where}: unknown field {unknown[0]!r} (known: {', '.join(sorted(spec))})")
    for name, (kind, required) in spec.items():
        if name not in data:
            if required:
                raise PmdbError(f"{where}: missing field {name!r}")
            continue
        value = data[name]
        field = f"{where}.{name}" if where else name
        if isinstance(kind, Mapping):
            if not isinstance(value, Mapping):
                raise PmdbError(f"{field} must be an object")
            check(value, kind, field)
            continue
        if kind is dict:
            if not isinstance(value, Mapping) or not value:
                raise PmdbError(f"{field} must be a non-empty object")
            for key, item in value.items():
                _check_number(f"{field}.{key}", item, float)
            continue
        if kind in (int, float):
            _check_number(field, value, kind)
        elif not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise PmdbError(f"{field} must be {_type_name(kind)}, not {type(value).__name__}")


def _check_number(field: str, value: Any, kind: type) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        ok = ok and float(value).is_integer()
    if not ok:
        raise PmdbError(f"{field} must be {'an integer' if kind is int else 'a number'}, not {value!r}")
    if value <= 0:
        raise PmdbError(f"{field} must be positive, not {value!r}")


def _type_name(kind: Any) -> str:
    names = {str: "a string", bool: "true or false", int: "an integer", float: "a number"}
    if isinstance(kind, tuple):
        return " or ".join(names.get(k, k.__name__) for k in kind)
    return names.get(kind, kind.__name__)
