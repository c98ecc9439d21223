"""Reading the JSON files users hand to pmdb (workload shapes, plans, config overrides, system and model specs)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pmdb.errors import PmdbError


def read_json(path: Path, what: str, *, want_object: bool = False) -> Any:
    """The parsed content of ``path``; a missing file, bad JSON (or, with ``want_object``, anything but a JSON
    object) is a one-line PmdbError naming ``what`` and the file."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise PmdbError(f"cannot read {what} file {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise PmdbError(f"{what} file {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except ValueError as exc:
        raise PmdbError(f"{what} file {path} is not valid JSON: {exc}") from None
    if want_object and not isinstance(data, dict):
        raise PmdbError(f"{what} file {path} must hold a JSON object")
    return data


def parse_object(path: Path, raw: bytes, *, not_json: str, what: str) -> dict[str, Any]:
    """The JSON object in ``raw`` (the bytes of ``path``, already read); bad JSON is one line
    '<path>[:<line>]: <not_json> (<reason>)', anything but an object '<path>: <what> is one JSON object'."""
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise PmdbError(f"{path}{where}: {not_json} ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise PmdbError(f"{path}: {what} is one JSON object")
    return data
